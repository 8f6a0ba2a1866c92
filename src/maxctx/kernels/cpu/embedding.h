// Fast token embedding: row copies (forward) and row adds (backward), OpenMP-parallel.
//
// Same signatures and semantics as kernels/ref/embedding.h: an id outside [0, V) is a
// MAXCTX_CHECK failure naming the id and its row, checked before any thread starts. Backward
// accumulates into the table; threads own column blocks and walk the tokens in order, so
// repeated tokens add up in the same order on any number of threads, without atomics. out, table
// and d_out may be f32 or bf16 each (FloatPtr; a bf16 row copied into f32 widens exactly, an f32
// row into bf16 rounds once); d_table is f32, a parameter gradient. The float* overloads are the
// fp32 case, with the reference's signatures.
#pragma once

#include <cstdint>

#include "maxctx/kernels/cpu/float_ptr.h"

namespace maxctx::kernels::cpu {

void embedding_forward(FloatPtr out,           // (N, D)
                       const int32_t* tokens,  // (N)
                       FloatPtr table,         // (V, D)
                       int64_t N, int64_t D, int64_t V);

void embedding_backward(float* d_table,         // (V, D) accumulated
                        FloatPtr d_out,         // (N, D)
                        const int32_t* tokens,  // (N)
                        int64_t N, int64_t D, int64_t V);

inline void embedding_forward(float* out, const int32_t* tokens, const float* table, int64_t N,
                              int64_t D, int64_t V) {
  embedding_forward(FloatPtr(out), tokens, FloatPtr(table), N, D, V);
}
inline void embedding_backward(float* d_table, const float* d_out, const int32_t* tokens, int64_t N,
                               int64_t D, int64_t V) {
  embedding_backward(d_table, FloatPtr(d_out), tokens, N, D, V);
}

}  // namespace maxctx::kernels::cpu

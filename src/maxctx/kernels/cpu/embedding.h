// Fast token embedding: row copies (forward) and row adds (backward), OpenMP-parallel.
//
// Same signatures and semantics as kernels/ref/embedding.h: an id outside [0, V) is a
// MAXCTX_CHECK failure naming the id and its row, checked before any thread starts. Backward
// accumulates into the table; threads own column blocks and walk the tokens in order, so
// repeated tokens add up in the same order on any number of threads, without atomics.
#pragma once

#include <cstdint>

namespace maxctx::kernels::cpu {

void embedding_forward(float* out,             // (N, D)
                       const int32_t* tokens,  // (N)
                       const float* table,     // (V, D)
                       int64_t N, int64_t D, int64_t V);

void embedding_backward(float* d_table,         // (V, D) accumulated
                        const float* d_out,     // (N, D)
                        const int32_t* tokens,  // (N)
                        int64_t N, int64_t D, int64_t V);

}  // namespace maxctx::kernels::cpu

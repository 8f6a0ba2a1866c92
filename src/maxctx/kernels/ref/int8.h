// Reference int8 quantization and int8 matmul: plain loops, the oracle for kernels/cpu/int8.h.
//
// One rule for every int8 tensor, symmetric with one scale per row (a weight's output channel, an
// activation's token, a KV-cache token over heads × head_dim):
//   max = max|x| over the row,  q = clamp(rint(x · (levels / max)), −127, 127),  scale = max /
//   levels
// so x ≈ q · scale. levels = 127 for weights and activations (max|x| maps to ±127 exactly) and
// 127.5 for the KV cache (MaxText's KVQuant: q = rint(x·127.5/max|x|)); with 127.5 the largest
// element lands on ±127.5, which rint takes to ±128, so the clamp to ±127 is what keeps it in
// int8 (an error of at most 1 code on that element). An all-zero row has scale 0 and codes 0.
// Rounding is round-half-to-even (rint in the default mode), the same in the cpu kernels.
//
// The matmul quantizes each input row with levels 127 and accumulates exactly in int32, so the
// cpu kernel (whatever its blocking) must produce the same bits:
//   out[n, o] = float(Σ_k xq[n, k] · wq[o, k]) · (x_scale[n] · w_scale[o])
#pragma once

#include <cstdint>

#include "maxctx/kernels/types.h"

namespace maxctx::kernels::ref {

// Quantizes one row; returns its scale. The single definition of the rule above.
float quantize_row_int8(int8_t* q,       // (cols)
                        const float* x,  // (cols)
                        int64_t cols, float levels);

void quantize_rows_int8(int8_t* q,       // (rows, cols)
                        float* scale,    // (rows)
                        const float* x,  // (rows, cols)
                        int64_t rows, int64_t cols, float levels);

void dequantize_rows_int8(float* x,            // (rows, cols)
                          const int8_t* q,     // (rows, cols)
                          const float* scale,  // (rows)
                          int64_t rows, int64_t cols);

// out = in · Wᵀ with W given as int8 codes per output row and in quantized per row (levels 127).
void int8_matmul_forward(float* out,            // (N, out_dim)
                         const float* in,       // (N, in_dim)
                         const int8_t* w,       // (out_dim, in_dim) codes
                         const float* w_scale,  // (out_dim)
                         int64_t N, int64_t in_dim, int64_t out_dim);

}  // namespace maxctx::kernels::ref

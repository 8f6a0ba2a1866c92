// Fast RMSNorm (Highway SIMD per row, OpenMP over rows): y = x · rsqrt(mean(x²) + eps) · w.
//
// Same signatures and semantics as kernels/ref/rmsnorm.h: forward saves rstd per row; backward
// overwrites d_in and accumulates d_weight. The d_weight sum over rows is taken in fixed row
// blocks (set by N alone) added in order: the same bits on any number of threads.
#pragma once

#include <cstdint>

namespace maxctx::kernels::cpu {

void rmsnorm_forward(float* out,           // (N, D)
                     float* rstd,          // (N) saved: 1 / sqrt(mean(x²) + eps)
                     const float* in,      // (N, D)
                     const float* weight,  // (D)
                     int64_t N, int64_t D, float eps);

void rmsnorm_backward(float* d_in,          // (N, D) overwritten
                      float* d_weight,      // (D) accumulated
                      const float* d_out,   // (N, D)
                      const float* in,      // (N, D)
                      const float* weight,  // (D)
                      const float* rstd,    // (N) from rmsnorm_forward
                      int64_t N, int64_t D);

}  // namespace maxctx::kernels::cpu

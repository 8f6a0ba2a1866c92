// Fast RMSNorm (Highway SIMD per row, OpenMP over rows): y = x · rsqrt(mean(x²) + eps) · w.
//
// Same semantics as kernels/ref/rmsnorm.h: forward saves rstd per row; backward overwrites d_in
// and accumulates d_weight. out, in, weight, d_in, d_out may each be f32 or bf16 (FloatPtr:
// widened, computed in fp32, each output rounded once); rstd and d_weight are f32 (statistics
// and parameter gradients). The float* overloads are the fp32 case, the reference's signatures. The
// d_weight sum over rows is taken in fixed row blocks (set by N alone) added in order: the same
// bits on any number of threads.
#pragma once

#include <cstdint>

#include "maxctx/kernels/cpu/float_ptr.h"

namespace maxctx::kernels::cpu {

void rmsnorm_forward(FloatPtr out,     // (N, D)
                     float* rstd,      // (N) saved: 1 / sqrt(mean(x²) + eps)
                     FloatPtr in,      // (N, D)
                     FloatPtr weight,  // (D)
                     int64_t N, int64_t D, float eps);

void rmsnorm_backward(FloatPtr d_in,      // (N, D) overwritten
                      float* d_weight,    // (D) accumulated
                      FloatPtr d_out,     // (N, D)
                      FloatPtr in,        // (N, D)
                      FloatPtr weight,    // (D)
                      const float* rstd,  // (N) from rmsnorm_forward
                      int64_t N, int64_t D);

inline void rmsnorm_forward(float* out, float* rstd, const float* in, const float* weight,
                            int64_t N, int64_t D, float eps) {
  rmsnorm_forward(FloatPtr(out), rstd, FloatPtr(in), FloatPtr(weight), N, D, eps);
}
inline void rmsnorm_backward(float* d_in, float* d_weight, const float* d_out, const float* in,
                             const float* weight, const float* rstd, int64_t N, int64_t D) {
  rmsnorm_backward(FloatPtr(d_in), d_weight, FloatPtr(d_out), FloatPtr(in), FloatPtr(weight), rstd,
                   N, D);
}

}  // namespace maxctx::kernels::cpu

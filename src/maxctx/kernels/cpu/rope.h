// Fast rotary position embedding, rotate-half convention (Highway SIMD over the half head,
// OpenMP over tokens).
//
// Same signatures and semantics as kernels/ref/rope.h, whose RopeParams and rope_inv_freq are
// shared: the cos/sin tables are built in double precision from explicit int32 positions and
// rounded to float once; rope_forward rotates by +angle, rope_backward by −angle, both allowed
// in place (same dtype). The rotated arrays may be f32 or bf16 each (FloatPtr: widened, rotated
// in fp32, rounded once); cos/sin are f32. The float* overloads are the fp32 case.
#pragma once

#include <cstdint>

#include "maxctx/kernels/cpu/float_ptr.h"
#include "maxctx/kernels/types.h"

namespace maxctx::kernels::cpu {

using kernels::rope_inv_freq;
using kernels::RopeParams;
using kernels::RopeScaling;

void rope_cos_sin(float* cos,                // (N, head_dim/2)
                  float* sin,                // (N, head_dim/2)
                  const int32_t* positions,  // (N)
                  int64_t N, int64_t head_dim, const RopeParams& params);

void rope_forward(FloatPtr out,      // (N, H, head_dim) may be in
                  FloatPtr in,       // (N, H, head_dim)
                  const float* cos,  // (N, head_dim/2) from rope_cos_sin
                  const float* sin,  // (N, head_dim/2)
                  int64_t N, int64_t H, int64_t head_dim);

void rope_backward(FloatPtr d_in,     // (N, H, head_dim) overwritten; may be d_out
                   FloatPtr d_out,    // (N, H, head_dim)
                   const float* cos,  // (N, head_dim/2) from rope_cos_sin
                   const float* sin,  // (N, head_dim/2)
                   int64_t N, int64_t H, int64_t head_dim);

inline void rope_forward(float* out, const float* in, const float* cos, const float* sin, int64_t N,
                         int64_t H, int64_t head_dim) {
  rope_forward(FloatPtr(out), FloatPtr(in), cos, sin, N, H, head_dim);
}
inline void rope_backward(float* d_in, const float* d_out, const float* cos, const float* sin,
                          int64_t N, int64_t H, int64_t head_dim) {
  rope_backward(FloatPtr(d_in), FloatPtr(d_out), cos, sin, N, H, head_dim);
}

}  // namespace maxctx::kernels::cpu

// Fast SwiGLU (Highway SIMD with a vectorized exp, OpenMP over element ranges):
// out = silu(gate) · up.
//
// Same semantics as kernels/ref/swiglu.h, in place allowed the same way (d_gate may be gate,
// d_up may be up, with the same dtype). Every operand may be f32 or bf16 on its own (FloatPtr:
// widened, computed in fp32, each output rounded once); the float* overloads are the fp32 case,
// with the reference's signatures. The sigmoid is evaluated as 1/(1+e) or e/(1+e) with
// e = exp(−|g|) ≤ 1, which never overflows whatever the gate's magnitude.
#pragma once

#include <cstdint>

#include "maxctx/kernels/cpu/float_ptr.h"

namespace maxctx::kernels::cpu {

void swiglu_forward(FloatPtr out,   // (N, F)
                    FloatPtr gate,  // (N, F)
                    FloatPtr up,    // (N, F)
                    int64_t N, int64_t F);

void swiglu_backward(FloatPtr d_gate,  // (N, F) overwritten; may be gate
                     FloatPtr d_up,    // (N, F) overwritten; may be up
                     FloatPtr d_out,   // (N, F)
                     FloatPtr gate,    // (N, F)
                     FloatPtr up,      // (N, F)
                     int64_t N, int64_t F);

inline void swiglu_forward(float* out, const float* gate, const float* up, int64_t N, int64_t F) {
  swiglu_forward(FloatPtr(out), FloatPtr(gate), FloatPtr(up), N, F);
}
inline void swiglu_backward(float* d_gate, float* d_up, const float* d_out, const float* gate,
                            const float* up, int64_t N, int64_t F) {
  swiglu_backward(FloatPtr(d_gate), FloatPtr(d_up), FloatPtr(d_out), FloatPtr(gate), FloatPtr(up),
                  N, F);
}

}  // namespace maxctx::kernels::cpu

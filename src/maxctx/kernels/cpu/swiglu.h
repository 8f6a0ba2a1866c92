// Fast SwiGLU (Highway SIMD with a vectorized exp, OpenMP over element ranges):
// out = silu(gate) · up.
//
// Same signatures and semantics as kernels/ref/swiglu.h, in place allowed the same way
// (d_gate may be gate, d_up may be up). The sigmoid is evaluated as 1/(1+e) or e/(1+e) with
// e = exp(−|g|) ≤ 1, which never overflows whatever the gate's magnitude.
#pragma once

#include <cstdint>

namespace maxctx::kernels::cpu {

void swiglu_forward(float* out,         // (N, F)
                    const float* gate,  // (N, F)
                    const float* up,    // (N, F)
                    int64_t N, int64_t F);

void swiglu_backward(float* d_gate,       // (N, F) overwritten; may be gate
                     float* d_up,         // (N, F) overwritten; may be up
                     const float* d_out,  // (N, F)
                     const float* gate,   // (N, F)
                     const float* up,     // (N, F)
                     int64_t N, int64_t F);

}  // namespace maxctx::kernels::cpu

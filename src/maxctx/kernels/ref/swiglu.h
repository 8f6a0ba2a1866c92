// Reference SwiGLU gate of the Llama MLP: out = silu(gate) · up, silu(g) = g·σ(g).
//
// The oracle for kernels/cpu/swiglu.h (same signatures at T = float). Both gradients are
// activation gradients (overwritten). Elementwise, so in place is allowed: d_gate may be gate
// and d_up may be up (each element is read before it is written).
//   d_up   = d_out · silu(g)
//   d_gate = d_out · up · σ(g)·(1 + g·(1 − σ(g)))
#pragma once

#include <cmath>
#include <cstdint>

namespace maxctx::kernels::ref {

template <typename T>
void swiglu_forward(T* out,         // (N, F)
                    const T* gate,  // (N, F)
                    const T* up,    // (N, F)
                    int64_t N, int64_t F) {
  for (int64_t k = 0; k < N * F; ++k) {
    const T sigmoid = T(1) / (T(1) + std::exp(-gate[k]));
    out[k] = gate[k] * sigmoid * up[k];
  }
}

template <typename T>
void swiglu_backward(T* d_gate,       // (N, F) overwritten; may be gate
                     T* d_up,         // (N, F) overwritten; may be up
                     const T* d_out,  // (N, F)
                     const T* gate,   // (N, F)
                     const T* up,     // (N, F)
                     int64_t N, int64_t F) {
  for (int64_t k = 0; k < N * F; ++k) {
    const T g = gate[k];
    const T u = up[k];
    const T sigmoid = T(1) / (T(1) + std::exp(-g));
    d_up[k] = d_out[k] * g * sigmoid;
    d_gate[k] = d_out[k] * u * sigmoid * (T(1) + g * (T(1) - sigmoid));
  }
}

}  // namespace maxctx::kernels::ref

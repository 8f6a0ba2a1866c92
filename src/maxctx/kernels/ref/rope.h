// Reference rotary position embedding, rotate-half convention (Hugging Face Llama, MaxText).
//
// A head vector x of size Dh (even) is split in halves; pair (x[i], x[i + Dh/2]) turns by the
// angle pos · inv_freq[i]:  out[i] = x[i]·cos − x[i+Dh/2]·sin,  out[i+Dh/2] = x[i+Dh/2]·cos +
// x[i]·sin. Positions are explicit per token (int32, any order: context parallelism shuffles
// tokens), so the same call serves training, prefill and decode.
//
// Two steps, because the angles are shared: rope_cos_sin builds the (N, Dh/2) cos and sin
// tables once per batch, in double precision (positions reach 1e5–1e6, where float angles lose
// digits), rounded to T only at the end; rope_forward / rope_backward then rotate q and k of
// every layer with them. Backward is the rotation by the negative angle. Both may run in place
// (out == in, d_in == d_out). The oracle for kernels/cpu/rope.h (same signatures at T = float).
#pragma once

#include <cmath>
#include <cstdint>
#include <vector>

#include "maxctx/core/check.h"
#include "maxctx/kernels/types.h"

namespace maxctx::kernels {

namespace ref {

using kernels::rope_inv_freq;
using kernels::RopeParams;
using kernels::RopeScaling;

template <typename T>
void rope_cos_sin(T* cos,                    // (N, head_dim/2)
                  T* sin,                    // (N, head_dim/2)
                  const int32_t* positions,  // (N)
                  int64_t N, int64_t head_dim, const RopeParams& params) {
  const std::vector<double> inv_freq = rope_inv_freq(params, head_dim);
  const int64_t half = head_dim / 2;
  for (int64_t n = 0; n < N; ++n) {
    for (int64_t i = 0; i < half; ++i) {
      const double angle = double(positions[n]) * inv_freq[i];
      cos[n * half + i] = T(std::cos(angle));
      sin[n * half + i] = T(std::sin(angle));
    }
  }
}

template <typename T>
void rope_forward(T* out,        // (N, H, head_dim) may be in
                  const T* in,   // (N, H, head_dim)
                  const T* cos,  // (N, head_dim/2) from rope_cos_sin
                  const T* sin,  // (N, head_dim/2)
                  int64_t N, int64_t H, int64_t head_dim) {
  MAXCTX_CHECK(head_dim > 0 && head_dim % 2 == 0, "rope needs an even head_dim > 0, got {}",
               head_dim);
  const int64_t half = head_dim / 2;
  for (int64_t n = 0; n < N; ++n) {
    for (int64_t h = 0; h < H; ++h) {
      const int64_t row = (n * H + h) * head_dim;
      for (int64_t i = 0; i < half; ++i) {
        const T c = cos[n * half + i];
        const T s = sin[n * half + i];
        const T x1 = in[row + i];
        const T x2 = in[row + half + i];
        out[row + i] = x1 * c - x2 * s;
        out[row + half + i] = x2 * c + x1 * s;
      }
    }
  }
}

template <typename T>
void rope_backward(T* d_in,         // (N, H, head_dim) overwritten; may be d_out
                   const T* d_out,  // (N, H, head_dim)
                   const T* cos,    // (N, head_dim/2) from rope_cos_sin
                   const T* sin,    // (N, head_dim/2)
                   int64_t N, int64_t H, int64_t head_dim) {
  MAXCTX_CHECK(head_dim > 0 && head_dim % 2 == 0, "rope needs an even head_dim > 0, got {}",
               head_dim);
  const int64_t half = head_dim / 2;
  for (int64_t n = 0; n < N; ++n) {
    for (int64_t h = 0; h < H; ++h) {
      const int64_t row = (n * H + h) * head_dim;
      for (int64_t i = 0; i < half; ++i) {
        const T c = cos[n * half + i];
        const T s = sin[n * half + i];
        const T g1 = d_out[row + i];
        const T g2 = d_out[row + half + i];
        d_in[row + i] = g1 * c + g2 * s;
        d_in[row + half + i] = g2 * c - g1 * s;
      }
    }
  }
}

}  // namespace ref
}  // namespace maxctx::kernels

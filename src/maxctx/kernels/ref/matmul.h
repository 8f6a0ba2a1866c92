// Reference matmul in the nn.Linear layout: out = in · weightᵀ, weight stored (out_dim, in_dim)
// as Hugging Face stores it. No bias: Llama has none.
//
// The oracle for kernels/cpu/matmul.h (same signatures at T = float). Plain triple loops that
// accumulate in T, never blocked or vectorized. Backward: d_weight accumulates (+=);
// d_in is overwritten, except in matmul_backward_accumulate_input, which adds to it (the
// residual stream sums several branches). d_in == nullptr skips the input gradient.
#pragma once

#include <cstdint>

namespace maxctx::kernels::ref {

template <typename T>
void matmul_forward(T* out,           // (N, out_dim)
                    const T* in,      // (N, in_dim)
                    const T* weight,  // (out_dim, in_dim)
                    int64_t N, int64_t in_dim, int64_t out_dim) {
  for (int64_t n = 0; n < N; ++n) {
    for (int64_t o = 0; o < out_dim; ++o) {
      T sum = 0;
      for (int64_t i = 0; i < in_dim; ++i) sum += in[n * in_dim + i] * weight[o * in_dim + i];
      out[n * out_dim + o] = sum;
    }
  }
}

namespace detail {
template <typename T>
void matmul_backward(T* d_in, T* d_weight, const T* d_out, const T* in, const T* weight, int64_t N,
                     int64_t in_dim, int64_t out_dim, bool accumulate_input) {
  if (d_in != nullptr) {
    for (int64_t n = 0; n < N; ++n) {
      for (int64_t i = 0; i < in_dim; ++i) {
        T sum = 0;
        for (int64_t o = 0; o < out_dim; ++o)
          sum += d_out[n * out_dim + o] * weight[o * in_dim + i];
        d_in[n * in_dim + i] = accumulate_input ? d_in[n * in_dim + i] + sum : sum;
      }
    }
  }
  for (int64_t o = 0; o < out_dim; ++o) {
    for (int64_t i = 0; i < in_dim; ++i) {
      T sum = 0;
      for (int64_t n = 0; n < N; ++n) sum += d_out[n * out_dim + o] * in[n * in_dim + i];
      d_weight[o * in_dim + i] += sum;
    }
  }
}
}  // namespace detail

template <typename T>
void matmul_backward(T* d_in,          // (N, in_dim) overwritten, or nullptr to skip
                     T* d_weight,      // (out_dim, in_dim) accumulated
                     const T* d_out,   // (N, out_dim)
                     const T* in,      // (N, in_dim)
                     const T* weight,  // (out_dim, in_dim)
                     int64_t N, int64_t in_dim, int64_t out_dim) {
  detail::matmul_backward(d_in, d_weight, d_out, in, weight, N, in_dim, out_dim, false);
}

template <typename T>
void matmul_backward_accumulate_input(T* d_in,          // (N, in_dim) accumulated, or nullptr
                                      T* d_weight,      // (out_dim, in_dim) accumulated
                                      const T* d_out,   // (N, out_dim)
                                      const T* in,      // (N, in_dim)
                                      const T* weight,  // (out_dim, in_dim)
                                      int64_t N, int64_t in_dim, int64_t out_dim) {
  detail::matmul_backward(d_in, d_weight, d_out, in, weight, N, in_dim, out_dim, true);
}

}  // namespace maxctx::kernels::ref

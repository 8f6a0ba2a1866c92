// Reference RMSNorm, the Hugging Face / MaxText form: y = x · rsqrt(mean(x²) + eps) · w.
//
// The oracle for kernels/cpu/rmsnorm.h (same signatures at T = float). Forward saves the
// reciprocal RMS per row for the backward. With r = rstd, g = d_out:
//   d_x_k = r·w_k·g_k − x_k · r³/D · Σ_j g_j·w_j·x_j   (overwritten)
//   d_w_k += Σ_rows g_k·x_k·r                           (accumulated)
#pragma once

#include <cmath>
#include <cstdint>

namespace maxctx::kernels::ref {

template <typename T>
void rmsnorm_forward(T* out,           // (N, D)
                     T* rstd,          // (N) saved: 1 / sqrt(mean(x²) + eps)
                     const T* in,      // (N, D)
                     const T* weight,  // (D)
                     int64_t N, int64_t D, T eps) {
  for (int64_t n = 0; n < N; ++n) {
    const T* x = in + n * D;
    T sum_squares = 0;
    for (int64_t j = 0; j < D; ++j) sum_squares += x[j] * x[j];
    const T r = T(1) / std::sqrt(sum_squares / T(D) + eps);
    for (int64_t j = 0; j < D; ++j) out[n * D + j] = x[j] * r * weight[j];
    rstd[n] = r;
  }
}

template <typename T>
void rmsnorm_backward(T* d_in,          // (N, D) overwritten
                      T* d_weight,      // (D) accumulated
                      const T* d_out,   // (N, D)
                      const T* in,      // (N, D)
                      const T* weight,  // (D)
                      const T* rstd,    // (N) from rmsnorm_forward
                      int64_t N, int64_t D) {
  for (int64_t n = 0; n < N; ++n) {
    const T* x = in + n * D;
    const T* g = d_out + n * D;
    const T r = rstd[n];
    T dot = 0;
    for (int64_t j = 0; j < D; ++j) dot += g[j] * weight[j] * x[j];
    const T coef = dot * r * r * r / T(D);
    for (int64_t j = 0; j < D; ++j) {
      d_in[n * D + j] = r * weight[j] * g[j] - coef * x[j];
      d_weight[j] += g[j] * x[j] * r;
    }
  }
}

}  // namespace maxctx::kernels::ref

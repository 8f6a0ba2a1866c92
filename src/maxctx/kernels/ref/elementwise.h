// Reference elementwise helpers the model and the trainer need: residual adds, scaling,
// zeroing, and the sum of squares behind gradient-norm clipping.
//
// The oracle for kernels/cpu/elementwise.h (same signatures at T = float). Every output may be
// exactly one of the inputs (in place); partial overlaps are not allowed.
#pragma once

#include <cstdint>

namespace maxctx::kernels::ref {

template <typename T>
void add(T* out,      // (n) may be a or b
         const T* a,  // (n)
         const T* b,  // (n)
         int64_t n) {
  for (int64_t k = 0; k < n; ++k) out[k] = a[k] + b[k];
}

template <typename T>
void add_inplace(T* acc,      // (n) acc += x
                 const T* x,  // (n)
                 int64_t n) {
  for (int64_t k = 0; k < n; ++k) acc[k] += x[k];
}

template <typename T>
void scale(T* out,       // (n) may be in
           const T* in,  // (n)
           T alpha, int64_t n) {
  for (int64_t k = 0; k < n; ++k) out[k] = alpha * in[k];
}

template <typename T>
void fill_zero(T* x,  // (n)
               int64_t n) {
  for (int64_t k = 0; k < n; ++k) x[k] = T(0);
}

// Σ x², accumulated in double whatever T is (the norm of a whole model's gradient).
template <typename T>
double sum_of_squares(const T* x,  // (n)
                      int64_t n) {
  double sum = 0;
  for (int64_t k = 0; k < n; ++k) sum += double(x[k]) * double(x[k]);
  return sum;
}

}  // namespace maxctx::kernels::ref

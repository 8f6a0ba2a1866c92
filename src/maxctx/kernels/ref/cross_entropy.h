// Reference masked softmax cross-entropy over the vocabulary.
//
// The oracle for kernels/cpu/cross_entropy.h (same signatures at T = float). Per row i:
//   lse[i]  = log Σ_v exp(logits[i, v])           (max-shifted, so it never overflows)
//   loss[i] = weights[i] · (lse[i] − logits[i, targets[i]])
// weights[i] == 0 masks a row (padding, segment id 0): its loss and d_logits are exactly 0 and
// its target is never read, so it may hold anything. lse is computed for every row. Backward
// (overwritten): d_logits = d_loss · w · (softmax − onehot), where d_loss = dL/dloss_i is one
// scalar for all rows (e.g. 1 / Σ weights). d_logits may be logits (in place).
#pragma once

#include <cmath>
#include <cstdint>

#include "maxctx/core/check.h"

namespace maxctx::kernels::ref {

namespace detail {
template <typename T>
void check_targets(const int32_t* targets, const T* weights, int64_t N, int64_t V) {
  MAXCTX_CHECK_GT(V, 0, "the vocabulary must not be empty");
  for (int64_t n = 0; n < N; ++n) {
    if (weights[n] == T(0)) continue;
    MAXCTX_CHECK(targets[n] >= 0 && targets[n] < V,
                 "target id {} at row {} (weight {}) is out of range: allowed 0 <= id < "
                 "vocab_size {}, or weight 0 to mask the row",
                 targets[n], n, weights[n], V);
  }
}
}  // namespace detail

template <typename T>
void cross_entropy_forward(T* loss,                 // (N) weighted per-row loss
                           T* lse,                  // (N) log-sum-exp of the row, saved
                           const T* logits,         // (N, V)
                           const int32_t* targets,  // (N) read only where weights != 0
                           const T* weights,        // (N) 0 masks the row
                           int64_t N, int64_t V) {
  detail::check_targets(targets, weights, N, V);
  for (int64_t n = 0; n < N; ++n) {
    const T* x = logits + n * V;
    T max = x[0];
    for (int64_t v = 1; v < V; ++v) max = x[v] > max ? x[v] : max;
    T sum = 0;
    for (int64_t v = 0; v < V; ++v) sum += std::exp(x[v] - max);
    lse[n] = max + std::log(sum);
    loss[n] = weights[n] == T(0) ? T(0) : weights[n] * (lse[n] - x[targets[n]]);
  }
}

template <typename T>
void cross_entropy_backward(T* d_logits,             // (N, V) overwritten; may be logits
                            const T* logits,         // (N, V)
                            const T* lse,            // (N) from cross_entropy_forward
                            const int32_t* targets,  // (N)
                            const T* weights,        // (N)
                            T d_loss,                // dL/dloss_i, the same for every row
                            int64_t N, int64_t V) {
  detail::check_targets(targets, weights, N, V);
  for (int64_t n = 0; n < N; ++n) {
    const T scale = d_loss * weights[n];
    for (int64_t v = 0; v < V; ++v) {
      d_logits[n * V + v] =
          weights[n] == T(0) ? T(0) : scale * std::exp(logits[n * V + v] - lse[n]);
    }
    if (weights[n] != T(0)) d_logits[n * V + targets[n]] -= scale;
  }
}

}  // namespace maxctx::kernels::ref

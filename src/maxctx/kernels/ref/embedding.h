// Reference token embedding: out row n = table row tokens[n].
//
// The oracle for kernels/cpu/embedding.h (same signatures at T = float). A token id outside
// [0, V) is a MAXCTX_CHECK failure that prints the id and its row. Backward scatters d_out
// back into the table rows, accumulating (+=): repeated tokens add up, in row order.
#pragma once

#include <cstdint>

#include "maxctx/core/check.h"

namespace maxctx::kernels::ref {

namespace detail {
inline void check_tokens(const int32_t* tokens, int64_t N, int64_t V) {
  for (int64_t n = 0; n < N; ++n) {
    MAXCTX_CHECK(tokens[n] >= 0 && tokens[n] < V,
                 "token id {} at row {} is out of range: allowed 0 <= id < vocab_size {}",
                 tokens[n], n, V);
  }
}
}  // namespace detail

template <typename T>
void embedding_forward(T* out,                 // (N, D)
                       const int32_t* tokens,  // (N)
                       const T* table,         // (V, D)
                       int64_t N, int64_t D, int64_t V) {
  detail::check_tokens(tokens, N, V);
  for (int64_t n = 0; n < N; ++n) {
    for (int64_t j = 0; j < D; ++j) out[n * D + j] = table[tokens[n] * D + j];
  }
}

template <typename T>
void embedding_backward(T* d_table,             // (V, D) accumulated
                        const T* d_out,         // (N, D)
                        const int32_t* tokens,  // (N)
                        int64_t N, int64_t D, int64_t V) {
  detail::check_tokens(tokens, N, V);
  for (int64_t n = 0; n < N; ++n) {
    for (int64_t j = 0; j < D; ++j) d_table[tokens[n] * D + j] += d_out[n * D + j];
  }
}

}  // namespace maxctx::kernels::ref

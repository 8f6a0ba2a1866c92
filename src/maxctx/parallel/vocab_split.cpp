#include "maxctx/parallel/vocab_split.h"

#include <algorithm>

#include "maxctx/core/check.h"
#include "maxctx/core/split.h"

namespace maxctx::parallel {

void AxisVocabSplit::embed(TensorView out, std::span<const int32_t> tokens, TensorView table_part) {
  const int ranks = axis_.size(), rank = axis_.rank();
  const auto N = static_cast<int64_t>(tokens.size());
  MAXCTX_CHECK(out.shape().rank() == 2 && out.shape()[0] == N,
               "embedding rows (N, E) for {} tokens, got {}", N, out.shape().to_string());
  MAXCTX_CHECK_EQ(table_part.shape()[0], split_count(vocab_size_, ranks, rank),
                  "this rank's rows of the embedding");
  const int64_t E = out.shape()[1];
  // Which rank holds token t's row: the last whose first row is <= t.
  const auto holder = [&](int32_t t) {
    int p = ranks - 1;
    while (split_offset(vocab_size_, ranks, p) > t) --p;
    return p;
  };
  std::vector<int64_t> send_counts(static_cast<size_t>(ranks), 0);
  for (int32_t t : tokens) ++send_counts[holder(t)];
  std::vector<int64_t> next(static_cast<size_t>(ranks), 0);
  for (int p = 1; p < ranks; ++p) next[p] = next[p - 1] + send_counts[p - 1];
  send_ids_.resize(static_cast<size_t>(N));
  std::vector<int32_t> arrival(static_cast<size_t>(N));
  for (int64_t n = 0; n < N; ++n) {
    const int64_t at = next[holder(tokens[n])]++;
    send_ids_[at] = tokens[n];
    arrival[n] = static_cast<int32_t>(at);
  }
  std::vector<int64_t> recv_counts(static_cast<size_t>(ranks));
  axis_.all_to_all(std::span<const int64_t>(send_counts), std::span<int64_t>(recv_counts));
  int64_t asked = 0;
  for (int64_t c : recv_counts) asked += c;
  recv_ids_.resize(static_cast<size_t>(asked));
  axis_.all_to_allv(std::span<const int32_t>(send_ids_), send_counts, std::span<int32_t>(recv_ids_),
                    recv_counts);
  const auto first = static_cast<int32_t>(split_offset(vocab_size_, ranks, rank));
  for (int32_t& id : recv_ids_) id -= first;
  kernels_.reserve(looked_up_, std::max<int64_t>(asked, 1) * E, out.dtype());
  kernels_.reserve(arrived_, std::max<int64_t>(N, 1) * E, out.dtype());
  const TensorView looked_up = looked_up_.view().elements(0, asked * E).reshaped({asked, E});
  const TensorView arrived = arrived_.view().elements(0, N * E).reshaped({N, E});
  if (asked > 0) {
    local_ids_.upload(kernels_, recv_ids_);
    kernels_.embedding_forward(looked_up, local_ids_.data(), table_part);
  }
  std::vector<int64_t> send_elements(recv_counts), recv_elements(send_counts);
  for (int64_t& c : send_elements) c *= E;
  for (int64_t& c : recv_elements) c *= E;
  axis_.all_to_allv(looked_up.elements(0, asked * E), send_elements, arrived.elements(0, N * E),
                    recv_elements, kernels_.stream());
  if (N == 0) return;
  // The rows arrived grouped by holder: token n's is row arrival[n] (one gather, no sums).
  token_order_.upload(kernels_, arrival);
  kernels_.embedding_forward(out, token_order_.data(), arrived);
}

void AxisVocabSplit::gather_rows(TensorView out, TensorView mine) {
  MAXCTX_CHECK_EQ(out.numel(), axis_.size() * mine.numel(), "every rank's rows");
  axis_.all_gather(mine, out, kernels_.stream());
}

}  // namespace maxctx::parallel

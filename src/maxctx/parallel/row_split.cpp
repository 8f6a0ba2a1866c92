#include "maxctx/parallel/row_split.h"

#include <algorithm>
#include <span>

namespace maxctx::parallel {

void AxisRowSplit::gather(float* out, const float* mine, int64_t N, int64_t out_dim) {
  const int ranks = axis_.size();
  // Parts differ by at most one row (split_counts): each is sent padded to the widest, so one
  // even all-gather carries them all, whatever N.
  const int64_t widest = split_count(out_dim, ranks, 0);
  const int64_t my_rows = split_count(out_dim, ranks, axis_.rank());
  send_.assign(static_cast<size_t>(N * widest), 0.0f);
  for (int64_t n = 0; n < N; ++n) {
    std::copy_n(mine + n * my_rows, my_rows, send_.begin() + n * widest);
  }
  recv_.resize(static_cast<size_t>(ranks) * send_.size());
  axis_.all_gather(std::span<const float>(send_), std::span<float>(recv_));
  for (int r = 0; r < ranks; ++r) {
    const int64_t first = split_offset(out_dim, ranks, r), rows = split_count(out_dim, ranks, r);
    const float* part = recv_.data() + r * N * widest;
    for (int64_t n = 0; n < N; ++n) {
      std::copy_n(part + n * widest, rows, out + n * out_dim + first);
    }
  }
}

}  // namespace maxctx::parallel

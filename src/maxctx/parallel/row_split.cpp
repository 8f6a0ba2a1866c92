#include "maxctx/parallel/row_split.h"

#include "maxctx/core/check.h"

namespace maxctx::parallel {
namespace {

// Columns [first, first + count) of one row of a matrix.
TensorView row_part(TensorView matrix, int64_t row, int64_t first, int64_t count) {
  return matrix.elements(row * matrix.shape()[1] + first, count);
}

}  // namespace

void AxisRowSplit::gather(TensorView out, TensorView mine) {
  MAXCTX_CHECK(out.dtype() == mine.dtype() && out.shape().rank() == 2 && mine.shape().rank() == 2,
               "a row split gathers (N, rows) parts of one dtype into (N, out_dim)");
  const int ranks = axis_.size();
  const int64_t N = out.shape()[0], out_dim = out.shape()[1];
  // Parts differ by at most one row (split_counts): each is sent padded to the widest, so one
  // even all-gather carries them all, whatever N.
  const int64_t widest = split_count(out_dim, ranks, 0);
  const int64_t my_rows = split_count(out_dim, ranks, axis_.rank());
  MAXCTX_CHECK_EQ(mine.numel(), N * my_rows, "this rank's part of a row split");
  kernels_.reserve(send_, N * widest, out.dtype());
  kernels_.reserve(recv_, ranks * N * widest, out.dtype());
  const TensorView send = send_.view().elements(0, N * widest);
  const TensorView recv = recv_.view().elements(0, ranks * N * widest);
  const TensorView send_rows = send.reshaped({N, widest});
  for (int64_t n = 0; n < N; ++n) {
    kernels_.copy(row_part(send_rows, n, 0, my_rows), row_part(mine, n, 0, my_rows));
  }
  axis_.all_gather(send, recv, kernels_.stream());
  const TensorView parts = recv.reshaped({ranks * N, widest});
  for (int r = 0; r < ranks; ++r) {
    const int64_t first = split_offset(out_dim, ranks, r), rows = split_count(out_dim, ranks, r);
    for (int64_t n = 0; n < N; ++n) {
      kernels_.copy(row_part(out, n, first, rows), row_part(parts, r * N + n, 0, rows));
    }
  }
}

void AxisTokenRowSplit::gather_inputs(TensorView all, TensorView mine) {
  MAXCTX_CHECK(all.dtype() == mine.dtype() && all.numel() == axis_.size() * mine.numel(),
               "a token row split gathers (N, in) of one dtype from every rank");
  axis_.all_gather(mine, all, kernels_.stream());
}

void AxisTokenRowSplit::return_outputs(TensorView out, TensorView computed) {
  MAXCTX_CHECK(
      out.dtype() == computed.dtype() && out.shape().rank() == 2 && computed.shape().rank() == 2,
      "a token row split returns (ranks·N, rows) parts of one dtype into (N, out_dim)");
  const int ranks = axis_.size();
  const int64_t N = out.shape()[0], out_dim = out.shape()[1];
  const int64_t widest = split_count(out_dim, ranks, 0);
  const int64_t my_rows = split_count(out_dim, ranks, axis_.rank());
  MAXCTX_CHECK_EQ(computed.numel(), ranks * N * my_rows, "this rank's part of a token row split");
  kernels_.reserve(send_, ranks * N * widest, out.dtype());
  kernels_.reserve(recv_, ranks * N * widest, out.dtype());
  // Block r of send: rank r's tokens, this rank's columns (padded to the widest part).
  const TensorView send =
      send_.view().elements(0, ranks * N * widest).reshaped({ranks * N, widest});
  const TensorView recv =
      recv_.view().elements(0, ranks * N * widest).reshaped({ranks * N, widest});
  for (int64_t n = 0; n < ranks * N; ++n) {
    kernels_.copy(row_part(send, n, 0, my_rows), row_part(computed, n, 0, my_rows));
  }
  axis_.all_to_all(send.reshaped({send.numel()}), recv.reshaped({recv.numel()}), kernels_.stream());
  // Block r of recv: this rank's tokens, rank r's columns.
  for (int r = 0; r < ranks; ++r) {
    const int64_t first = split_offset(out_dim, ranks, r), rows = split_count(out_dim, ranks, r);
    for (int64_t n = 0; n < N; ++n) {
      kernels_.copy(row_part(out, n, first, rows), row_part(recv, r * N + n, 0, rows));
    }
  }
}

}  // namespace maxctx::parallel

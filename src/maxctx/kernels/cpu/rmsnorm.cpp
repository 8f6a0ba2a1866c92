// Fast RMSNorm: one Highway pass per row for the statistics and one for the output. Backward
// reads each row once: d_in, and the row's share of d_weight added into its row block's partial
// sum; the partials are then reduced in block order, so no two threads ever add into the same
// element and the bits do not depend on the thread count.
#include "maxctx/kernels/cpu/rmsnorm.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "maxctx/kernels/cpu/threading.h"

#ifndef HWY_WANT_AVX3_DL
#define HWY_WANT_AVX3_DL  // Highway 1.0.3 workaround, see elementwise.cpp
#endif
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "maxctx/kernels/cpu/rmsnorm.cpp"
// foreach_target.h must precede highway.h and the -inl.h headers.
// clang-format off
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
// clang-format on

HWY_BEFORE_NAMESPACE();
namespace maxctx::kernels::cpu {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// Σ a·b·c over one row, in float lanes, then the tail in order.
float RmsnormDot3(const float* a, const float* b, const float* c, int64_t n) {
  const hn::ScalableTag<float> d;
  const int64_t lanes = hn::Lanes(d);
  auto acc0 = hn::Zero(d);
  auto acc1 = hn::Zero(d);
  int64_t j = 0;
  for (; j + 2 * lanes <= n; j += 2 * lanes) {
    acc0 = hn::MulAdd(hn::Mul(hn::LoadU(d, a + j), hn::LoadU(d, b + j)), hn::LoadU(d, c + j), acc0);
    acc1 = hn::MulAdd(hn::Mul(hn::LoadU(d, a + j + lanes), hn::LoadU(d, b + j + lanes)),
                      hn::LoadU(d, c + j + lanes), acc1);
  }
  for (; j + lanes <= n; j += lanes) {
    acc0 = hn::MulAdd(hn::Mul(hn::LoadU(d, a + j), hn::LoadU(d, b + j)), hn::LoadU(d, c + j), acc0);
  }
  float sum = hn::GetLane(hn::SumOfLanes(d, hn::Add(acc0, acc1)));
  for (; j < n; ++j) sum += a[j] * b[j] * c[j];
  return sum;
}

void RmsnormForwardRows(float* out, float* rstd, const float* in, const float* weight, int64_t rows,
                        int64_t D, float eps) {
  const hn::ScalableTag<float> d;
  const int64_t lanes = hn::Lanes(d);
  for (int64_t n = 0; n < rows; ++n) {
    const float* x = in + n * D;
    float* y = out + n * D;
    auto acc0 = hn::Zero(d);
    auto acc1 = hn::Zero(d);
    int64_t j = 0;
    for (; j + 2 * lanes <= D; j += 2 * lanes) {
      const auto v0 = hn::LoadU(d, x + j);
      const auto v1 = hn::LoadU(d, x + j + lanes);
      acc0 = hn::MulAdd(v0, v0, acc0);
      acc1 = hn::MulAdd(v1, v1, acc1);
    }
    for (; j + lanes <= D; j += lanes) {
      const auto v = hn::LoadU(d, x + j);
      acc0 = hn::MulAdd(v, v, acc0);
    }
    float sum_squares = hn::GetLane(hn::SumOfLanes(d, hn::Add(acc0, acc1)));
    for (; j < D; ++j) sum_squares += x[j] * x[j];
    const float r = 1.0f / std::sqrt(sum_squares / float(D) + eps);
    const auto vr = hn::Set(d, r);
    j = 0;
    for (; j + lanes <= D; j += lanes) {
      hn::StoreU(hn::Mul(hn::Mul(hn::LoadU(d, x + j), vr), hn::LoadU(d, weight + j)), d, y + j);
    }
    for (; j < D; ++j) y[j] = x[j] * r * weight[j];
    rstd[n] = r;
  }
}

// d_in for `rows` rows, and partial_weight = Σ over those rows of d_out·in·rstd (overwritten),
// while each row is still in L1.
void RmsnormBackwardRows(float* d_in, float* partial_weight, const float* d_out, const float* in,
                         const float* weight, const float* rstd, int64_t rows, int64_t D) {
  const hn::ScalableTag<float> d;
  const int64_t lanes = hn::Lanes(d);
  std::fill(partial_weight, partial_weight + D, 0.0f);
  for (int64_t n = 0; n < rows; ++n) {
    const float* x = in + n * D;
    const float* g = d_out + n * D;
    float* dx = d_in + n * D;
    const float r = rstd[n];
    const float coef = RmsnormDot3(g, weight, x, D) * r * r * r / float(D);
    const auto vr = hn::Set(d, r);
    const auto vcoef = hn::Set(d, coef);
    int64_t j = 0;
    for (; j + lanes <= D; j += lanes) {
      const auto vx = hn::LoadU(d, x + j);
      const auto vg = hn::LoadU(d, g + j);
      const auto scaled = hn::Mul(hn::Mul(vr, hn::LoadU(d, weight + j)), vg);
      hn::StoreU(hn::NegMulAdd(vcoef, vx, scaled), d, dx + j);
      hn::StoreU(hn::MulAdd(hn::Mul(vg, vx), vr, hn::LoadU(d, partial_weight + j)), d,
                 partial_weight + j);
    }
    for (; j < D; ++j) {
      dx[j] = r * weight[j] * g[j] - coef * x[j];
      partial_weight[j] += g[j] * x[j] * r;
    }
  }
}

// d_weight[c0, c1) += Σ_b partials[b, c0:c1), blocks in order.
void RmsnormReduceWeightColumns(float* d_weight, const float* partials, int64_t blocks, int64_t D,
                                int64_t c0, int64_t c1) {
  const hn::ScalableTag<float> d;
  const int64_t lanes = hn::Lanes(d);
  int64_t c = c0;
  for (; c + lanes <= c1; c += lanes) {
    auto sum = hn::LoadU(d, partials + c);
    for (int64_t b = 1; b < blocks; ++b) sum = hn::Add(sum, hn::LoadU(d, partials + b * D + c));
    hn::StoreU(hn::Add(hn::LoadU(d, d_weight + c), sum), d, d_weight + c);
  }
  for (; c < c1; ++c) {
    float sum = partials[c];
    for (int64_t b = 1; b < blocks; ++b) sum += partials[b * D + c];
    d_weight[c] += sum;
  }
}

}  // namespace HWY_NAMESPACE
}  // namespace maxctx::kernels::cpu
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace maxctx::kernels::cpu {

HWY_EXPORT(RmsnormForwardRows);
HWY_EXPORT(RmsnormBackwardRows);
HWY_EXPORT(RmsnormReduceWeightColumns);

namespace {
// The d_weight sum is split into at most kMaxRowBlocks blocks of rows, fixed by N alone (never
// by the thread count), each summed while its rows are in cache; the blocks are then added in
// order, column blocks in parallel.
constexpr int64_t kMaxRowBlocks = 64;
constexpr int64_t kMinRowsPerBlock = 16;
constexpr int64_t kWeightColumnBlock = 256;  // a multiple of every vector width
}  // namespace

void rmsnorm_forward(float* out, float* rstd, const float* in, const float* weight, int64_t N,
                     int64_t D, float eps) {
  auto& rmsnorm_forward_rows = HWY_DYNAMIC_DISPATCH(RmsnormForwardRows);
  parallel_for(N, items_per_task(D), [&](int64_t begin, int64_t end) {
    rmsnorm_forward_rows(out + begin * D, rstd + begin, in + begin * D, weight, end - begin, D,
                         eps);
  });
}

void rmsnorm_backward(float* d_in, float* d_weight, const float* d_out, const float* in,
                      const float* weight, const float* rstd, int64_t N, int64_t D) {
  auto& rmsnorm_backward_rows = HWY_DYNAMIC_DISPATCH(RmsnormBackwardRows);
  auto& rmsnorm_reduce_weight_columns = HWY_DYNAMIC_DISPATCH(RmsnormReduceWeightColumns);
  if (N <= 0 || D <= 0) return;
  const int64_t rows_per_block =
      std::max(kMinRowsPerBlock, (N + kMaxRowBlocks - 1) / kMaxRowBlocks);
  const int64_t blocks = (N + rows_per_block - 1) / rows_per_block;
  // (blocks, D) partial sums; kept per calling thread so that steady-state calls do not allocate.
  thread_local std::vector<float> partials;
  if (partials.size() < size_t(blocks * D)) partials.resize(size_t(blocks * D));
  float* partial = partials.data();
  parallel_for(blocks, items_per_task(rows_per_block * D), [&](int64_t begin, int64_t end) {
    for (int64_t b = begin; b < end; ++b) {
      const int64_t row0 = b * rows_per_block;
      rmsnorm_backward_rows(d_in + row0 * D, partial + b * D, d_out + row0 * D, in + row0 * D,
                            weight, rstd + row0, std::min(rows_per_block, N - row0), D);
    }
  });
  const int64_t column_blocks = (D + kWeightColumnBlock - 1) / kWeightColumnBlock;
  parallel_for(
      column_blocks, items_per_task(blocks * kWeightColumnBlock), [&](int64_t begin, int64_t end) {
        rmsnorm_reduce_weight_columns(d_weight, partial, blocks, D, begin * kWeightColumnBlock,
                                      std::min(D, end * kWeightColumnBlock));
      });
}

}  // namespace maxctx::kernels::cpu
#endif  // HWY_ONCE

// Fast RMSNorm: one Highway pass per row for the statistics and one for the output, templated
// over the storage type (f32|bf16) of each row operand. Backward
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
#include "maxctx/kernels/cpu/float_storage-inl.h"
// clang-format on

HWY_BEFORE_NAMESPACE();
namespace maxctx::kernels::cpu {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// Σ a·b·c over one row, in float lanes, then the tail in order.
template <class TA, class TB, class TC>
float RmsnormDot3(const TA* a, const TB* b, const TC* c, int64_t n) {
  const hn::ScalableTag<float> d;
  const int64_t lanes = hn::Lanes(d);
  auto acc0 = hn::Zero(d);
  auto acc1 = hn::Zero(d);
  int64_t j = 0;
  for (; j + 2 * lanes <= n; j += 2 * lanes) {
    acc0 = hn::MulAdd(hn::Mul(LoadF32(d, a + j), LoadF32(d, b + j)), LoadF32(d, c + j), acc0);
    acc1 = hn::MulAdd(hn::Mul(LoadF32(d, a + j + lanes), LoadF32(d, b + j + lanes)),
                      LoadF32(d, c + j + lanes), acc1);
  }
  for (; j + lanes <= n; j += lanes) {
    acc0 = hn::MulAdd(hn::Mul(LoadF32(d, a + j), LoadF32(d, b + j)), LoadF32(d, c + j), acc0);
  }
  float sum = hn::GetLane(hn::SumOfLanes(d, hn::Add(acc0, acc1)));
  for (; j < n; ++j) sum += ToF32(a[j]) * ToF32(b[j]) * ToF32(c[j]);
  return sum;
}

struct RmsnormForwardKernel {
  float* rstd;
  int64_t rows, D;
  float eps;
  template <class TO, class TI, class TW>
  void operator()(TO* out, const TI* in, const TW* weight) const {
    const hn::ScalableTag<float> d;
    const int64_t lanes = hn::Lanes(d);
    for (int64_t n = 0; n < rows; ++n) {
      const TI* x = in + n * D;
      TO* y = out + n * D;
      auto acc0 = hn::Zero(d);
      auto acc1 = hn::Zero(d);
      int64_t j = 0;
      for (; j + 2 * lanes <= D; j += 2 * lanes) {
        const auto v0 = LoadF32(d, x + j);
        const auto v1 = LoadF32(d, x + j + lanes);
        acc0 = hn::MulAdd(v0, v0, acc0);
        acc1 = hn::MulAdd(v1, v1, acc1);
      }
      for (; j + lanes <= D; j += lanes) {
        const auto v = LoadF32(d, x + j);
        acc0 = hn::MulAdd(v, v, acc0);
      }
      float sum_squares = hn::GetLane(hn::SumOfLanes(d, hn::Add(acc0, acc1)));
      for (; j < D; ++j) sum_squares += ToF32(x[j]) * ToF32(x[j]);
      const float r = 1.0f / std::sqrt(sum_squares / float(D) + eps);
      const auto vr = hn::Set(d, r);
      j = 0;
      for (; j + lanes <= D; j += lanes) {
        StoreRounded(d, hn::Mul(hn::Mul(LoadF32(d, x + j), vr), LoadF32(d, weight + j)), y + j);
      }
      for (; j < D; ++j) StoreRounded(ToF32(x[j]) * r * ToF32(weight[j]), y + j);
      rstd[n] = r;
    }
  }
};

void RmsnormForwardRows(FloatPtr out, float* rstd, FloatPtr in, FloatPtr weight, int64_t rows,
                        int64_t D, float eps) {
  const FloatPtr ptrs[] = {out, in, weight};
  DispatchStorage<3>(RmsnormForwardKernel{rstd, rows, D, eps}, ptrs);
}

// d_in for `rows` rows, and partial_weight = Σ over those rows of d_out·in·rstd (overwritten),
// while each row is still in L1.
struct RmsnormBackwardKernel {
  float* partial_weight;
  const float* rstd;
  int64_t rows, D;
  template <class TDI, class TDO, class TI, class TW>
  void operator()(TDI* d_in, const TDO* d_out, const TI* in, const TW* weight) const {
    const hn::ScalableTag<float> d;
    const int64_t lanes = hn::Lanes(d);
    std::fill(partial_weight, partial_weight + D, 0.0f);
    for (int64_t n = 0; n < rows; ++n) {
      const TI* x = in + n * D;
      const TDO* g = d_out + n * D;
      TDI* dx = d_in + n * D;
      const float r = rstd[n];
      const float coef = RmsnormDot3(g, weight, x, D) * r * r * r / float(D);
      const auto vr = hn::Set(d, r);
      const auto vcoef = hn::Set(d, coef);
      int64_t j = 0;
      for (; j + lanes <= D; j += lanes) {
        const auto vx = LoadF32(d, x + j);
        const auto vg = LoadF32(d, g + j);
        const auto scaled = hn::Mul(hn::Mul(vr, LoadF32(d, weight + j)), vg);
        StoreRounded(d, hn::NegMulAdd(vcoef, vx, scaled), dx + j);
        hn::StoreU(hn::MulAdd(hn::Mul(vg, vx), vr, hn::LoadU(d, partial_weight + j)), d,
                   partial_weight + j);
      }
      for (; j < D; ++j) {
        const float xj = ToF32(x[j]);
        const float gj = ToF32(g[j]);
        StoreRounded(r * ToF32(weight[j]) * gj - coef * xj, dx + j);
        partial_weight[j] += gj * xj * r;
      }
    }
  }
};

void RmsnormBackwardRows(FloatPtr d_in, float* partial_weight, FloatPtr d_out, FloatPtr in,
                         FloatPtr weight, const float* rstd, int64_t rows, int64_t D) {
  const FloatPtr ptrs[] = {d_in, d_out, in, weight};
  DispatchStorage<4>(RmsnormBackwardKernel{partial_weight, rstd, rows, D}, ptrs);
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

void rmsnorm_forward(FloatPtr out, float* rstd, FloatPtr in, FloatPtr weight, int64_t N, int64_t D,
                     float eps) {
  auto& rmsnorm_forward_rows = HWY_DYNAMIC_DISPATCH(RmsnormForwardRows);
  parallel_for(N, items_per_task(D), [&](int64_t begin, int64_t end) {
    rmsnorm_forward_rows(out + begin * D, rstd + begin, in + begin * D, weight, end - begin, D,
                         eps);
  });
}

void rmsnorm_backward(FloatPtr d_in, float* d_weight, FloatPtr d_out, FloatPtr in, FloatPtr weight,
                      const float* rstd, int64_t N, int64_t D) {
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

// Matrix-vector product for one token row: a group of weight rows shares each load of x (four
// f32 rows, or eight bf16 rows: the same bytes in flight, which took the bf16 stream from 11 to
// 13 GB/s against f32's 15 on one core), two vector accumulators per row, and the next group's
// rows prefetched at the column being read. Every row is computed the same way wherever it falls
// in a group (the last rows go one at a time through the same steps), so a row's bits depend on
// neither the row range a caller passes (a row split's part) nor the thread count.
#include "maxctx/kernels/cpu/gemv.h"

#include <cmath>

#include "maxctx/kernels/cpu/threading.h"

#ifndef HWY_WANT_AVX3_DL
#define HWY_WANT_AVX3_DL  // Highway 1.0.3 workaround, see elementwise.cpp
#endif
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "maxctx/kernels/cpu/gemv.cpp"
// clang-format off
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
#include "hwy/cache_control.h"
// clang-format on

HWY_BEFORE_NAMESPACE();
namespace maxctx::kernels::cpu {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;
using DF = hn::ScalableTag<float>;
using VF = hn::Vec<DF>;

constexpr int64_t kRowsPerGroup = 4;

// in_dim weights from `row` as floats: loaded as they are, or bf16 widened exactly.
HWY_INLINE VF LoadWeights(DF d, const float* row) { return hn::LoadU(d, row); }
HWY_INLINE VF LoadWeights(DF d, const hwy::bfloat16_t* row) {
  return hn::PromoteTo(d, hn::LoadU(hn::Rebind<hwy::bfloat16_t, DF>(), row));
}
HWY_INLINE float WeightToFloat(float w) { return w; }
HWY_INLINE float WeightToFloat(hwy::bfloat16_t w) { return hwy::F32FromBF16(w); }

// out[o] = w_row(o) · in for rows [begin, end) of w (rows of in_dim weights, W float or bf16).
template <typename W>
void GemvRowsOf(float* out, const float* in, const W* w, int64_t in_dim, int64_t begin,
                int64_t end) {
  const DF d;
  const int64_t N = static_cast<int64_t>(hn::Lanes(d));
  // One row's steps: pairs of vectors into two accumulators, then one vector, then the tail.
  // The four-row loop below repeats exactly these steps per row.
  auto finish = [&](VF even, VF odd, const W* row, int64_t k) {
    if (k + N <= in_dim) {
      even = hn::MulAdd(LoadWeights(d, row + k), hn::LoadU(d, in + k), even);
      k += N;
    }
    float sum = hn::GetLane(hn::SumOfLanes(d, hn::Add(even, odd)));
    // Fused explicitly: left to the compiler, `sum += w * x` is contracted into an FMA in one
    // instantiation and not in another (seen with g++ 12 on Zen 5), and rows lose their bits.
    for (; k < in_dim; ++k) sum = std::fma(WeightToFloat(row[k]), in[k], sum);
    return sum;
  };
  const int64_t pairs_end = in_dim / (2 * N) * (2 * N);
  // kRows rows at a time (4 for f32, 8 for bf16: as many bytes in flight per step), the next
  // group's rows prefetched at the column being read.
  constexpr int64_t kRows = kRowsPerGroup * static_cast<int64_t>(sizeof(float) / sizeof(W));
  const int64_t ahead = kRows * in_dim;
  int64_t o = begin;
  for (; o + kRows <= end; o += kRows) {
    const W* r = w + o * in_dim;
    VF even[kRows], odd[kRows];
#pragma GCC unroll 8
    for (int64_t j = 0; j < kRows; ++j) even[j] = odd[j] = hn::Zero(d);
    for (int64_t k = 0; k < pairs_end; k += 2 * N) {
#pragma GCC unroll 8
      for (int64_t j = 0; j < kRows; ++j) {
        for (int64_t line = 0; line < 2 * N; line += 64 / int64_t{sizeof(W)}) {  // 64-byte lines
          hwy::Prefetch(r + j * in_dim + ahead + k + line);
        }
      }
      const VF x0 = hn::LoadU(d, in + k), x1 = hn::LoadU(d, in + k + N);
#pragma GCC unroll 8
      for (int64_t j = 0; j < kRows; ++j) {
        even[j] = hn::MulAdd(LoadWeights(d, r + j * in_dim + k), x0, even[j]);
        odd[j] = hn::MulAdd(LoadWeights(d, r + j * in_dim + k + N), x1, odd[j]);
      }
    }
#pragma GCC unroll 8
    for (int64_t j = 0; j < kRows; ++j) {
      out[o + j] = finish(even[j], odd[j], r + j * in_dim, pairs_end);
    }
  }
  for (; o < end; ++o) {
    const W* row = w + o * in_dim;
    VF even = hn::Zero(d), odd = even;
    for (int64_t k = 0; k < pairs_end; k += 2 * N) {
      even = hn::MulAdd(LoadWeights(d, row + k), hn::LoadU(d, in + k), even);
      odd = hn::MulAdd(LoadWeights(d, row + k + N), hn::LoadU(d, in + k + N), odd);
    }
    out[o] = finish(even, odd, row, pairs_end);
  }
}

void GemvRows(float* out, const float* in, const float* w, int64_t in_dim, int64_t begin,
              int64_t end) {
  GemvRowsOf(out, in, w, in_dim, begin, end);
}
void GemvRowsBf16(float* out, const float* in, const hwy::bfloat16_t* w, int64_t in_dim,
                  int64_t begin, int64_t end) {
  GemvRowsOf(out, in, w, in_dim, begin, end);
}

}  // namespace HWY_NAMESPACE
}  // namespace maxctx::kernels::cpu
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace maxctx::kernels::cpu {

HWY_EXPORT(GemvRows);
HWY_EXPORT(GemvRowsBf16);

namespace {

// Tasks of whole groups of rows (the split never changes a row's bits anyway).
template <typename W, typename Rows>
void gemv_rows_in_parallel(Rows& rows, float* out, const float* in, const W* weight, int64_t in_dim,
                           int64_t out_dim) {
  const int64_t grain = (items_per_task(in_dim) + 7) / 8 * 8;  // whole groups of 4 or 8 rows
  parallel_for(out_dim, grain,
               [&](int64_t begin, int64_t end) { rows(out, in, weight, in_dim, begin, end); });
}

}  // namespace

void gemv_forward(float* out, const float* in, const float* weight, int64_t in_dim,
                  int64_t out_dim) {
  gemv_rows_in_parallel(HWY_DYNAMIC_DISPATCH(GemvRows), out, in, weight, in_dim, out_dim);
}

void gemv_forward_bf16(float* out, const float* in, const bf16* weight, int64_t in_dim,
                       int64_t out_dim) {
  gemv_rows_in_parallel(HWY_DYNAMIC_DISPATCH(GemvRowsBf16), out, in,
                        reinterpret_cast<const hwy::bfloat16_t*>(weight), in_dim, out_dim);
}

}  // namespace maxctx::kernels::cpu
#endif  // HWY_ONCE

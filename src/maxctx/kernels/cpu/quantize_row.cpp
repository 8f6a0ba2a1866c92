// Highway, every x86 target above the baseline, chosen at run time (as elementwise.cpp).
#include "maxctx/kernels/cpu/quantize_row.h"

#include <algorithm>
#include <cmath>

#ifndef HWY_WANT_AVX3_DL
#define HWY_WANT_AVX3_DL
#endif
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "maxctx/kernels/cpu/quantize_row.cpp"
// clang-format off
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
// clang-format on

HWY_BEFORE_NAMESPACE();
namespace maxctx::kernels::cpu {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// max|x| with the reference's rule, std::max(m, |x|) = m < |x| ? |x| : m, lane by lane: the
// maximum of the non-NaN values, whatever the order.
float MaxAbs(const float* x, int64_t n) {
  const hn::ScalableTag<float> d;
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(d));
  auto best = hn::Zero(d);
  int64_t i = 0;
  for (; i + lanes <= n; i += lanes) {
    const auto a = hn::Abs(hn::LoadU(d, x + i));
    best = hn::IfThenElse(hn::Lt(best, a), a, best);
  }
  HWY_ALIGN float lane[hn::MaxLanes(d)];
  hn::Store(best, d, lane);
  float m = 0.0f;
  for (int64_t l = 0; l < lanes; ++l) m = std::max(m, lane[l]);
  for (; i < n; ++i) m = std::max(m, std::fabs(x[i]));
  return m;
}

// codes[i] = clamp(round-half-even(x[i] · inv), ±127) + offset, as int32 lanes demoted with
// saturation to the code type (the clamp keeps them in range).
template <typename Code>
void Codes(Code* codes, const float* x, int64_t n, float inv, int offset) {
  const hn::ScalableTag<float> d;
  const hn::Rebind<int32_t, decltype(d)> di;
  const hn::Rebind<Code, decltype(d)> dc;
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(d));
  const auto vinv = hn::Set(d, inv), lo = hn::Set(d, -127.0f), hi = hn::Set(d, 127.0f);
  const auto voffset = hn::Set(di, offset);
  int64_t i = 0;
  for (; i + lanes <= n; i += lanes) {
    const auto code = hn::Min(hn::Max(hn::Round(hn::Mul(hn::LoadU(d, x + i), vinv)), lo), hi);
    hn::StoreU(hn::DemoteTo(dc, hn::Add(hn::ConvertTo(di, code), voffset)), dc, codes + i);
  }
  for (; i < n; ++i) {
    const float code = std::clamp(std::nearbyint(x[i] * inv), -127.0f, 127.0f);
    codes[i] = static_cast<Code>(static_cast<int>(code) + offset);
  }
}

// The rule for one row: codes of x · levels / max|x| plus `offset`; returns the scale. A row
// without a nonzero finite value gets zero codes and scale 0, as in the reference.
template <typename Code>
float QuantizeRow(Code* codes, const float* x, int64_t n, float levels, int offset) {
  const float max_abs = MaxAbs(x, n);
  if (max_abs == 0.0f) {
    std::fill(codes, codes + n, static_cast<Code>(offset));
    return 0.0f;
  }
  Codes(codes, x, n, levels / max_abs, offset);
  return max_abs / levels;
}

float QuantizeRowSigned(int8_t* codes, const float* x, int64_t n, float levels) {
  return QuantizeRow(codes, x, n, levels, 0);
}

float QuantizeRowOffset(uint8_t* codes, const float* x, int64_t n, float levels) {
  return QuantizeRow(codes, x, n, levels, 128);
}

}  // namespace HWY_NAMESPACE
}  // namespace maxctx::kernels::cpu
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace maxctx::kernels::cpu {

HWY_EXPORT(QuantizeRowSigned);
HWY_EXPORT(QuantizeRowOffset);

float quantize_row_signed(int8_t* codes, const float* x, int64_t n, float levels) {
  return HWY_DYNAMIC_DISPATCH(QuantizeRowSigned)(codes, x, n, levels);
}

float quantize_row_offset(uint8_t* codes, const float* x, int64_t n, float levels) {
  return HWY_DYNAMIC_DISPATCH(QuantizeRowOffset)(codes, x, n, levels);
}

}  // namespace maxctx::kernels::cpu
#endif

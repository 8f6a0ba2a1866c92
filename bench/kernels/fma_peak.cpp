// The FMA probe of fma_peak.h, one copy per Highway target, dispatched at run time.
//
// 12 chains: more than the 2 FMA pipes × 4 cycles of latency of a Zen 4 or Zen 5 core need in
// flight, and all of them fit in the vector registers with the two constants.
#include "kernels/fma_peak.h"

#ifndef HWY_WANT_AVX3_DL
#define HWY_WANT_AVX3_DL  // Highway 1.0.3 leaves AVX3_DL out unless asked
#endif
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/fma_peak.cpp"
// clang-format off
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
// clang-format on

HWY_BEFORE_NAMESPACE();
namespace maxctx::bench {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

float run_fma_chains(int64_t iterations) {
  const hn::ScalableTag<float> d;
  const auto mul = hn::Set(d, 0.999999f);
  const auto add = hn::Set(d, 1e-6f);
  hn::Vec<decltype(d)> acc[kFmaChains];
  for (int j = 0; j < kFmaChains; ++j) acc[j] = hn::Set(d, static_cast<float>(j));
  for (int64_t i = 0; i < iterations; ++i) {
#pragma GCC unroll 12
    for (int j = 0; j < kFmaChains; ++j) acc[j] = hn::MulAdd(acc[j], mul, add);
  }
  auto sum = acc[0];
  for (int j = 1; j < kFmaChains; ++j) sum = hn::Add(sum, acc[j]);
  return hn::GetLane(sum);
}

int64_t fma_vector_lanes() { return static_cast<int64_t>(hn::Lanes(hn::ScalableTag<float>())); }
int64_t fma_target() { return HWY_TARGET; }

}  // namespace HWY_NAMESPACE
}  // namespace maxctx::bench
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace maxctx::bench {

HWY_EXPORT(run_fma_chains);
HWY_EXPORT(fma_vector_lanes);
HWY_EXPORT(fma_target);

float run_fma_chains(int64_t iterations) {
  return HWY_DYNAMIC_DISPATCH(run_fma_chains)(iterations);
}
int64_t fma_vector_lanes() { return HWY_DYNAMIC_DISPATCH(fma_vector_lanes)(); }
const char* fma_target_name() { return hwy::TargetName(HWY_DYNAMIC_DISPATCH(fma_target)()); }

}  // namespace maxctx::bench
#endif  // HWY_ONCE

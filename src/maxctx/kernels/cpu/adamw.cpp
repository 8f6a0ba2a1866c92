// AdamW per dtype mix. The all-f32 update runs the build's baseline target (HWY_STATIC_DISPATCH),
// exactly the code it always ran; mixes with bf16 pay for widening and rounding and so take the
// widest target the CPU has (dynamic dispatch; on AVX-512, 5.4 ms instead of 7.7 for 4M bf16
// parameters with f32 gradients: the update is bound by its divisions and the rounding).
#include "maxctx/kernels/cpu/adamw.h"

#include <algorithm>

#ifndef HWY_WANT_AVX3_DL
#define HWY_WANT_AVX3_DL  // Highway 1.0.3 workaround, see elementwise.cpp
#endif
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "maxctx/kernels/cpu/adamw.cpp"
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

// One instantiation per dtype mix of (params, grads, mu, nu). The new moments feed the update
// unrounded; params and moments are each rounded once as they are stored.
struct AdamwKernel {
  int64_t count;
  const AdamWStep& step;
  template <class TP, class TG, class TM, class TV>
  void operator()(TP* params, const TG* grads, TM* mu, TV* nu) const {
    const hn::ScalableTag<float> d;
    const size_t lanes = hn::Lanes(d);
    const auto b1 = hn::Set(d, step.b1), b2 = hn::Set(d, step.b2);
    const auto one_minus_b1 = hn::Set(d, step.one_minus_b1);
    const auto one_minus_b2 = hn::Set(d, step.one_minus_b2);
    const auto correction1 = hn::Set(d, step.correction1);
    const auto correction2 = hn::Set(d, step.correction2);
    const auto eps = hn::Set(d, step.eps), eps_root = hn::Set(d, step.eps_root);
    const auto decay = hn::Set(d, step.weight_decay), lr = hn::Set(d, step.learning_rate);
    const auto update_lanes = [&](TP* p, const TG* g, TM* m, TV* v) {
      const auto g_i = LoadF32(d, g);
      const auto p_i = LoadF32(d, p);
      const auto m_i = hn::Add(hn::Mul(one_minus_b1, g_i), hn::Mul(b1, LoadF32(d, m)));
      const auto v_i =
          hn::Add(hn::Mul(one_minus_b2, hn::Mul(g_i, g_i)), hn::Mul(b2, LoadF32(d, v)));
      StoreRounded(d, m_i, m);
      StoreRounded(d, v_i, v);
      const auto m_hat = hn::Div(m_i, correction1);
      const auto v_hat = hn::Div(v_i, correction2);
      const auto adam = hn::Div(m_hat, hn::Add(hn::Sqrt(hn::Add(v_hat, eps_root)), eps));
      StoreRounded(d, hn::Sub(p_i, hn::Mul(lr, hn::Add(adam, hn::Mul(decay, p_i)))), p);
    };
    const auto n = static_cast<size_t>(count);
    size_t i = 0;
    for (; i + lanes <= n; i += lanes) update_lanes(params + i, grads + i, mu + i, nu + i);
    if (i < n) {
      const size_t rest = n - i;
      constexpr size_t kMaxLanes = HWY_MAX_BYTES / sizeof(float);
      alignas(64) TP tail_p[kMaxLanes] = {};
      alignas(64) TG tail_g[kMaxLanes] = {};
      alignas(64) TM tail_m[kMaxLanes] = {};
      alignas(64) TV tail_v[kMaxLanes] = {};
      std::copy_n(params + i, rest, tail_p);
      std::copy_n(grads + i, rest, tail_g);
      std::copy_n(mu + i, rest, tail_m);
      std::copy_n(nu + i, rest, tail_v);
      update_lanes(tail_p, tail_g, tail_m, tail_v);
      std::copy_n(tail_p, rest, params + i);
      std::copy_n(tail_m, rest, mu + i);
      std::copy_n(tail_v, rest, nu + i);
    }
  }
};

void AdamwRange(FloatPtr params, FloatPtr grads, FloatPtr mu, FloatPtr nu, int64_t count,
                const AdamWStep& step) {
  const FloatPtr ptrs[] = {params, grads, mu, nu};
  DispatchStorage<4>(AdamwKernel{count, step}, ptrs);
}

}  // namespace HWY_NAMESPACE
}  // namespace maxctx::kernels::cpu
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace maxctx::kernels::cpu {

HWY_EXPORT(AdamwRange);

void adamw_update(FloatPtr params, FloatPtr grads, FloatPtr mu, FloatPtr nu, int64_t count,
                  const AdamWStep& step) {
  const bool all_f32 = !params.is_bf16() && !grads.is_bf16() && !mu.is_bf16() && !nu.is_bf16();
  if (all_f32) {
    HWY_STATIC_DISPATCH(AdamwRange)(params, grads, mu, nu, count, step);
  } else {
    HWY_DYNAMIC_DISPATCH(AdamwRange)(params, grads, mu, nu, count, step);
  }
}

}  // namespace maxctx::kernels::cpu
#endif  // HWY_ONCE

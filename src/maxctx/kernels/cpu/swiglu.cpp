// Fast SwiGLU. Each step is written once over a Highway tag and the operands' storage types and
// run with full vectors, then with one-lane vectors for the tail, so the tail uses the same exp
// as the body.
#include "maxctx/kernels/cpu/swiglu.h"

#include "maxctx/kernels/cpu/threading.h"

#ifndef HWY_WANT_AVX3_DL
#define HWY_WANT_AVX3_DL  // Highway 1.0.3 workaround, see elementwise.cpp
#endif
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "maxctx/kernels/cpu/swiglu.cpp"
// foreach_target.h must precede highway.h and the -inl.h headers.
// clang-format off
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
#include "hwy/contrib/math/math-inl.h"
#include "maxctx/kernels/cpu/float_storage-inl.h"
// clang-format on

HWY_BEFORE_NAMESPACE();
namespace maxctx::kernels::cpu {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

template <class D, class V>
HWY_INLINE V SwigluSigmoid(D d, V g) {
  const auto one = hn::Set(d, 1.0f);
  const auto e = hn::Exp(d, hn::Neg(hn::Abs(g)));
  const auto inv = hn::Div(one, hn::Add(one, e));
  return hn::IfThenElse(hn::Lt(g, hn::Zero(d)), hn::Mul(e, inv), inv);
}

template <class D, class TO, class TG, class TU>
HWY_INLINE void SwigluForwardStep(D d, TO* out, const TG* gate, const TU* up, int64_t k) {
  const auto g = LoadF32(d, gate + k);
  StoreRounded(d, hn::Mul(hn::Mul(g, SwigluSigmoid(d, g)), LoadF32(d, up + k)), out + k);
}

template <class D, class TDG, class TDU, class TDO, class TG, class TU>
HWY_INLINE void SwigluBackwardStep(D d, TDG* d_gate, TDU* d_up, const TDO* d_out, const TG* gate,
                                   const TU* up, int64_t k) {
  const auto one = hn::Set(d, 1.0f);
  const auto g = LoadF32(d, gate + k);
  const auto u = LoadF32(d, up + k);
  const auto dy = LoadF32(d, d_out + k);
  const auto s = SwigluSigmoid(d, g);
  // d_gate = dy·u·σ·(1 + g·(1 − σ)); both loads happen before either store (in place is fine).
  const auto d_silu = hn::Mul(s, hn::MulAdd(g, hn::Sub(one, s), one));
  StoreRounded(d, hn::Mul(hn::Mul(dy, g), s), d_up + k);
  StoreRounded(d, hn::Mul(hn::Mul(dy, u), d_silu), d_gate + k);
}

struct SwigluForwardKernel {
  int64_t n;
  template <class TO, class TG, class TU>
  void operator()(TO* out, const TG* gate, const TU* up) const {
    const hn::ScalableTag<float> d;
    const hn::CappedTag<float, 1> d1;
    const int64_t lanes = hn::Lanes(d);
    int64_t k = 0;
    for (; k + lanes <= n; k += lanes) SwigluForwardStep(d, out, gate, up, k);
    for (; k < n; ++k) SwigluForwardStep(d1, out, gate, up, k);
  }
};

void SwigluForwardRange(FloatPtr out, FloatPtr gate, FloatPtr up, int64_t n) {
  const FloatPtr ptrs[] = {out, gate, up};
  DispatchStorage<3>(SwigluForwardKernel{n}, ptrs);
}

struct SwigluBackwardKernel {
  int64_t n;
  template <class TDG, class TDU, class TDO, class TG, class TU>
  void operator()(TDG* d_gate, TDU* d_up, const TDO* d_out, const TG* gate, const TU* up) const {
    const hn::ScalableTag<float> d;
    const hn::CappedTag<float, 1> d1;
    const int64_t lanes = hn::Lanes(d);
    int64_t k = 0;
    for (; k + lanes <= n; k += lanes) SwigluBackwardStep(d, d_gate, d_up, d_out, gate, up, k);
    for (; k < n; ++k) SwigluBackwardStep(d1, d_gate, d_up, d_out, gate, up, k);
  }
};

void SwigluBackwardRange(FloatPtr d_gate, FloatPtr d_up, FloatPtr d_out, FloatPtr gate, FloatPtr up,
                         int64_t n) {
  const FloatPtr ptrs[] = {d_gate, d_up, d_out, gate, up};
  DispatchStorage<5>(SwigluBackwardKernel{n}, ptrs);
}

}  // namespace HWY_NAMESPACE
}  // namespace maxctx::kernels::cpu
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace maxctx::kernels::cpu {

HWY_EXPORT(SwigluForwardRange);
HWY_EXPORT(SwigluBackwardRange);

void swiglu_forward(FloatPtr out, FloatPtr gate, FloatPtr up, int64_t N, int64_t F) {
  auto& swiglu_forward_range = HWY_DYNAMIC_DISPATCH(SwigluForwardRange);
  parallel_for(N * F, kMinElementsPerTask, [&](int64_t begin, int64_t end) {
    swiglu_forward_range(out + begin, gate + begin, up + begin, end - begin);
  });
}

void swiglu_backward(FloatPtr d_gate, FloatPtr d_up, FloatPtr d_out, FloatPtr gate, FloatPtr up,
                     int64_t N, int64_t F) {
  auto& swiglu_backward_range = HWY_DYNAMIC_DISPATCH(SwigluBackwardRange);
  parallel_for(N * F, kMinElementsPerTask, [&](int64_t begin, int64_t end) {
    swiglu_backward_range(d_gate + begin, d_up + begin, d_out + begin, gate + begin, up + begin,
                          end - begin);
  });
}

}  // namespace maxctx::kernels::cpu
#endif  // HWY_ONCE

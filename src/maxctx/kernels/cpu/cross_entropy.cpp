// Fast masked cross-entropy: per row, a vector max, then a vector Σ exp(x − max) (Highway's
// exp, 1 ulp), lse = max + log(sum) in scalar. Backward is one elementwise pass per row. The
// tails run the same Highway code on one-lane vectors.
#include "maxctx/kernels/cpu/cross_entropy.h"

#include <cmath>
#include <cstring>
#include <type_traits>

#include "maxctx/kernels/cpu/threading.h"
#include "maxctx/kernels/view_checks.h"

#ifndef HWY_WANT_AVX3_DL
#define HWY_WANT_AVX3_DL  // Highway 1.0.3 workaround, see elementwise.cpp
#endif
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "maxctx/kernels/cpu/cross_entropy.cpp"
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

template <class T>
float XentRowLogSumExp(const T* x, int64_t V) {
  const hn::ScalableTag<float> d;
  const hn::CappedTag<float, 1> d1;
  const int64_t lanes = hn::Lanes(d);
  auto vmax = hn::Set(d, ToF32(x[0]));
  int64_t v = 0;
  for (; v + lanes <= V; v += lanes) vmax = hn::Max(vmax, LoadF32(d, x + v));
  float max = hn::GetLane(hn::MaxOfLanes(d, vmax));
  for (; v < V; ++v) max = ToF32(x[v]) > max ? ToF32(x[v]) : max;

  const auto shift = hn::Set(d, max);
  auto acc0 = hn::Zero(d);
  auto acc1 = hn::Zero(d);
  v = 0;
  for (; v + 2 * lanes <= V; v += 2 * lanes) {
    acc0 = hn::Add(acc0, hn::Exp(d, hn::Sub(LoadF32(d, x + v), shift)));
    acc1 = hn::Add(acc1, hn::Exp(d, hn::Sub(LoadF32(d, x + v + lanes), shift)));
  }
  for (; v + lanes <= V; v += lanes) {
    acc0 = hn::Add(acc0, hn::Exp(d, hn::Sub(LoadF32(d, x + v), shift)));
  }
  float sum = hn::GetLane(hn::SumOfLanes(d, hn::Add(acc0, acc1)));
  const auto shift1 = hn::Set(d1, max);
  for (; v < V; ++v) sum += hn::GetLane(hn::Exp(d1, hn::Sub(LoadF32(d1, x + v), shift1)));
  return max + std::log(sum);
}

struct XentForwardKernel {
  float* loss;
  float* lse;
  const int32_t* targets;
  const float* weights;
  int64_t rows, V;
  template <class T>
  void operator()(const T* logits) const {
    for (int64_t n = 0; n < rows; ++n) {
      const T* x = logits + n * V;
      lse[n] = XentRowLogSumExp(x, V);
      loss[n] = weights[n] == 0.0f ? 0.0f : weights[n] * (lse[n] - ToF32(x[targets[n]]));
    }
  }
};

void XentForwardRows(float* loss, float* lse, FloatPtr logits, const int32_t* targets,
                     const float* weights, int64_t rows, int64_t V) {
  DispatchStorage<1>(XentForwardKernel{loss, lse, targets, weights, rows, V}, &logits);
}

template <class D, class TI>
HWY_INLINE hn::Vec<D> XentScaledSoftmax(D d, const TI* x, float lse, float scale, int64_t v) {
  const auto p = hn::Exp(d, hn::Sub(LoadF32(d, x + v), hn::Set(d, lse)));
  return hn::Mul(hn::Set(d, scale), p);
}

// The target's entry is scale·p − scale: in f32 from the stored scale·p, in bf16 recomputed from
// the logit saved before the row pass (which may overwrite it, in place) and rounded once.
struct XentBackwardKernel {
  const float* lse;
  const int32_t* targets;
  const float* weights;
  float d_loss;
  int64_t rows, V;
  template <class TO, class TI>
  void operator()(TO* d_logits, const TI* logits) const {
    const hn::ScalableTag<float> d;
    const hn::CappedTag<float, 1> d1;
    const int64_t lanes = hn::Lanes(d);
    for (int64_t n = 0; n < rows; ++n) {
      TO* out = d_logits + n * V;
      if (weights[n] == 0.0f) {
        std::memset(static_cast<void*>(out), 0, sizeof(TO) * size_t(V));
        continue;
      }
      const TI* x = logits + n * V;
      const float scale = d_loss * weights[n];
      const TI target_logit = x[targets[n]];
      int64_t v = 0;
      for (; v + lanes <= V; v += lanes) {
        StoreRounded(d, XentScaledSoftmax(d, x, lse[n], scale, v), out + v);
      }
      for (; v < V; ++v) {
        StoreRounded(d1, XentScaledSoftmax(d1, x, lse[n], scale, v), out + v);
      }
      if constexpr (std::is_same_v<TO, float>) {
        out[targets[n]] -= scale;  // holds scale·p unrounded
      } else {
        const float target_p = hn::GetLane(XentScaledSoftmax(d1, &target_logit, lse[n], scale, 0));
        StoreRounded(target_p - scale, out + targets[n]);
      }
    }
  }
};

void XentBackwardRows(FloatPtr d_logits, FloatPtr logits, const float* lse, const int32_t* targets,
                      const float* weights, float d_loss, int64_t rows, int64_t V) {
  const FloatPtr ptrs[] = {d_logits, logits};
  DispatchStorage<2>(XentBackwardKernel{lse, targets, weights, d_loss, rows, V}, ptrs);
}

}  // namespace HWY_NAMESPACE
}  // namespace maxctx::kernels::cpu
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace maxctx::kernels::cpu {

HWY_EXPORT(XentForwardRows);
HWY_EXPORT(XentBackwardRows);

void cross_entropy_forward(float* loss, float* lse, FloatPtr logits, const int32_t* targets,
                           const float* weights, int64_t N, int64_t V) {
  auto& xent_forward_rows = HWY_DYNAMIC_DISPATCH(XentForwardRows);
  check_target_ids(targets, weights, N, V);
  // An exp costs a few multiply-adds: a logit counts as 4 elements of work.
  parallel_for(N, items_per_task(4 * V), [&](int64_t begin, int64_t end) {
    xent_forward_rows(loss + begin, lse + begin, logits + begin * V, targets + begin,
                      weights + begin, end - begin, V);
  });
}

void cross_entropy_backward(FloatPtr d_logits, FloatPtr logits, const float* lse,
                            const int32_t* targets, const float* weights, float d_loss, int64_t N,
                            int64_t V) {
  auto& xent_backward_rows = HWY_DYNAMIC_DISPATCH(XentBackwardRows);
  check_target_ids(targets, weights, N, V);
  parallel_for(N, items_per_task(4 * V), [&](int64_t begin, int64_t end) {
    xent_backward_rows(d_logits + begin * V, logits + begin * V, lse + begin, targets + begin,
                       weights + begin, d_loss, end - begin, V);
  });
}

}  // namespace maxctx::kernels::cpu
#endif  // HWY_ONCE

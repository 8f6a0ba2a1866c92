// Fast elementwise helpers: one Highway loop per op, templated over the storage type of each
// operand, compiled for every x86 target Highway can attain above the build's baseline and chosen
// at run time (foreach_target + dynamic dispatch). The OpenMP loops live outside the per-target
// code, so they never meet target attributes.
#include "maxctx/kernels/cpu/elementwise.h"

#include <cstring>

#include "maxctx/kernels/cpu/threading.h"

// Highway 1.0.3 drops AVX3_DL from its dynamic targets even when it is the baseline
// (-march=native on Zen 4) and then refuses to compile; asking for it is the upstream fix.
#ifndef HWY_WANT_AVX3_DL
#define HWY_WANT_AVX3_DL
#endif
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "maxctx/kernels/cpu/elementwise.cpp"
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

struct AddKernel {
  int64_t n;
  template <class TO, class TA, class TB>
  void operator()(TO* out, const TA* a, const TB* b) const {
    const hn::ScalableTag<float> d;
    const int64_t lanes = hn::Lanes(d);
    int64_t k = 0;
    for (; k + lanes <= n; k += lanes) {
      StoreRounded(d, hn::Add(LoadF32(d, a + k), LoadF32(d, b + k)), out + k);
    }
    for (; k < n; ++k) StoreRounded(ToF32(a[k]) + ToF32(b[k]), out + k);
  }
};

void AddRange(FloatPtr out, FloatPtr a, FloatPtr b, int64_t n) {
  const FloatPtr ptrs[] = {out, a, b};
  DispatchStorage<3>(AddKernel{n}, ptrs);
}

struct ScaleKernel {
  float alpha;
  int64_t n;
  template <class TO, class TI>
  void operator()(TO* out, const TI* in) const {
    const hn::ScalableTag<float> d;
    const int64_t lanes = hn::Lanes(d);
    const auto valpha = hn::Set(d, alpha);
    int64_t k = 0;
    for (; k + lanes <= n; k += lanes) {
      StoreRounded(d, hn::Mul(valpha, LoadF32(d, in + k)), out + k);
    }
    for (; k < n; ++k) StoreRounded(alpha * ToF32(in[k]), out + k);
  }
};

void ScaleRange(FloatPtr out, FloatPtr in, float alpha, int64_t n) {
  const FloatPtr ptrs[] = {out, in};
  DispatchStorage<2>(ScaleKernel{alpha, n}, ptrs);
}

struct ConvertKernel {
  int64_t n;
  template <class TO, class TI>
  void operator()(TO* out, const TI* in) const {
    const hn::ScalableTag<float> d;
    const int64_t lanes = hn::Lanes(d);
    int64_t k = 0;
    for (; k + lanes <= n; k += lanes) StoreRounded(d, LoadF32(d, in + k), out + k);
    for (; k < n; ++k) StoreRounded(ToF32(in[k]), out + k);
  }
};

void ConvertRange(FloatPtr out, FloatPtr in, int64_t n) {
  const FloatPtr ptrs[] = {out, in};
  DispatchStorage<2>(ConvertKernel{n}, ptrs);
}

}  // namespace HWY_NAMESPACE
}  // namespace maxctx::kernels::cpu
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace maxctx::kernels::cpu {

HWY_EXPORT(AddRange);
HWY_EXPORT(ScaleRange);
HWY_EXPORT(ConvertRange);

void add(FloatPtr out, FloatPtr a, FloatPtr b, int64_t n) {
  auto& add_range = HWY_DYNAMIC_DISPATCH(AddRange);
  parallel_for(n, kMinElementsPerTask, [&](int64_t begin, int64_t end) {
    add_range(out + begin, a + begin, b + begin, end - begin);
  });
}

void add_inplace(FloatPtr acc, FloatPtr x, int64_t n) { add(acc, acc, x, n); }

void scale(FloatPtr out, FloatPtr in, float alpha, int64_t n) {
  auto& scale_range = HWY_DYNAMIC_DISPATCH(ScaleRange);
  parallel_for(n, kMinElementsPerTask, [&](int64_t begin, int64_t end) {
    scale_range(out + begin, in + begin, alpha, end - begin);
  });
}

void convert(FloatPtr dst, FloatPtr src, int64_t n) {
  parallel_for(n, kMinElementsPerTask, [&](int64_t begin, int64_t end) {
    convert_serial(dst + begin, src + begin, end - begin);
  });
}

void convert_serial(FloatPtr dst, FloatPtr src, int64_t n) {
  if (dst.dtype() == src.dtype()) {
    if (n > 0 && dst.raw() != src.raw()) {
      std::memmove(dst.raw(), src.raw(), size_t(n) * dtype_size(dst.dtype()));
    }
    return;
  }
  HWY_DYNAMIC_DISPATCH(ConvertRange)(dst, src, n);
}

void fill_zero(float* x, int64_t n) {
  if (n > 0) std::memset(x, 0, sizeof(float) * size_t(n));
}

}  // namespace maxctx::kernels::cpu
#endif  // HWY_ONCE

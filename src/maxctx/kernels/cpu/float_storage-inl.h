// Per-target helpers for f32|bf16 operands (included once per Highway target, after
// hwy/highway.h, by the .cpp files that use foreach_target).
//
// LoadF32 widens (exactly) and StoreRounded rounds once to nearest even, overloaded on the
// storage type, so one templated loop serves every dtype mix; at float storage they are the plain
// LoadU/StoreU, so fp32 code compiles to what it was. Highway 1.0.3's DemoteTo(bf16) truncates,
// hence the integer rounding below: the same bits as core/dtype.h's float_to_bf16, NaN kept a
// (quiet) NaN. DispatchStorage turns FloatPtrs into typed pointers, one instantiation per mix.
#if defined(MAXCTX_KERNELS_CPU_FLOAT_STORAGE_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef MAXCTX_KERNELS_CPU_FLOAT_STORAGE_INL_H_
#undef MAXCTX_KERNELS_CPU_FLOAT_STORAGE_INL_H_
#else
#define MAXCTX_KERNELS_CPU_FLOAT_STORAGE_INL_H_
#endif

#include <cstddef>
#include <cstdint>

#include "hwy/highway.h"
#include "maxctx/core/dtype.h"
#include "maxctx/kernels/cpu/float_ptr.h"

HWY_BEFORE_NAMESPACE();
namespace maxctx::kernels::cpu {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

template <class D>
HWY_INLINE hn::Vec<D> LoadF32(D d, const float* p) {
  return hn::LoadU(d, p);
}
template <class D>
HWY_INLINE hn::Vec<D> LoadF32(D d, const bf16* p) {
  const hn::RebindToUnsigned<D> du32;
  const hn::Rebind<uint16_t, D> du16;
  const auto bits = hn::PromoteTo(du32, hn::LoadU(du16, reinterpret_cast<const uint16_t*>(p)));
  return hn::BitCast(d, hn::ShiftLeft<16>(bits));
}

template <class D>
HWY_INLINE void StoreRounded(D d, hn::Vec<D> v, float* p) {
  hn::StoreU(v, d, p);
}
template <class D>
HWY_INLINE void StoreRounded(D d, hn::Vec<D> v, bf16* p) {
  const hn::RebindToUnsigned<D> du32;
  const hn::RebindToSigned<D> di32;
  const hn::Rebind<uint16_t, D> du16;
  const auto bits = hn::BitCast(du32, v);
  const auto upper = hn::ShiftRight<16>(bits);
  // Round half to even: add 0x7fff plus the lowest kept bit, then keep the upper half.
  const auto bias = hn::Add(hn::Set(du32, 0x7fffu), hn::And(upper, hn::Set(du32, 1u)));
  const auto rounded = hn::ShiftRight<16>(hn::Add(bits, bias));
  const auto quiet_nan = hn::Or(upper, hn::Set(du32, 0x0040u));
  const auto out = hn::IfThenElse(hn::RebindMask(du32, hn::IsNaN(v)), quiet_nan, rounded);
  // Every lane is in [0, 0xffff]: the saturating demote keeps it as it is.
  hn::StoreU(hn::DemoteTo(du16, hn::BitCast(di32, out)), du16, reinterpret_cast<uint16_t*>(p));
}

// Scalar forms, for row statistics and the odd element outside the vector loops.
HWY_INLINE float ToF32(float v) { return v; }
HWY_INLINE float ToF32(bf16 v) { return bf16_to_float(v); }
HWY_INLINE void StoreRounded(float v, float* p) { *p = v; }
HWY_INLINE void StoreRounded(float v, bf16* p) { *p = float_to_bf16(v); }

// Calls kernel(typed...) with ptrs[0, kCount) turned into float* or bf16* by their dtypes.
template <size_t kCount, class Kernel, class... Typed>
HWY_INLINE void DispatchStorage(const Kernel& kernel, const FloatPtr* ptrs, Typed*... typed) {
  if constexpr (kCount == 0) {
    kernel(typed...);
  } else if (ptrs->is_bf16()) {
    DispatchStorage<kCount - 1>(kernel, ptrs + 1, typed..., static_cast<bf16*>(ptrs->raw()));
  } else {
    DispatchStorage<kCount - 1>(kernel, ptrs + 1, typed..., static_cast<float*>(ptrs->raw()));
  }
}

}  // namespace HWY_NAMESPACE
}  // namespace maxctx::kernels::cpu
HWY_AFTER_NAMESPACE();

#endif  // MAXCTX_KERNELS_CPU_FLOAT_STORAGE_INL_H_

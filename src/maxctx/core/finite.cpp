#include "maxctx/core/finite.h"

#include <algorithm>

namespace maxctx {
namespace {

// An exponent field of all ones is Inf or NaN, in f32 and in bf16 (its upper half) alike.
template <typename Bits>
std::optional<int64_t> first_all_ones_exponent(const void* data, int64_t n, Bits exponent_mask) {
  const auto* bits = static_cast<const Bits*>(data);
  // Blocks of 4096 with a branch-free OR of the test: the common all-finite case vectorizes.
  constexpr int64_t kBlock = 4096;
  for (int64_t begin = 0; begin < n; begin += kBlock) {
    const int64_t end = std::min(n, begin + kBlock);
    bool any = false;
    for (int64_t i = begin; i < end; ++i) any |= (bits[i] & exponent_mask) == exponent_mask;
    if (!any) continue;
    for (int64_t i = begin; i < end; ++i) {
      if ((bits[i] & exponent_mask) == exponent_mask) return i;
    }
  }
  return std::nullopt;
}

}  // namespace

std::optional<int64_t> first_non_finite(const TensorView& values) {
  switch (values.dtype()) {
    case DType::kF32:
      return first_all_ones_exponent<uint32_t>(values.raw(), values.numel(), 0x7f800000u);
    case DType::kBF16:
      return first_all_ones_exponent<uint16_t>(values.raw(), values.numel(), uint16_t{0x7f80});
    default:
      return std::nullopt;
  }
}

}  // namespace maxctx

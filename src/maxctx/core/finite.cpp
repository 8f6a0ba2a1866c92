#include "maxctx/core/finite.h"

#include <algorithm>

namespace maxctx {
namespace {

// The first element whose exponent field is at least `threshold` (within `exponent_mask`): an
// exponent of all ones is Inf or NaN, in f32 and in bf16 (its upper half) alike, and a smaller
// threshold also finds magnitudes from a power of two up.
template <typename Bits>
std::optional<int64_t> first_exponent_at_least(const void* data, int64_t n, Bits exponent_mask,
                                               Bits threshold) {
  const auto* bits = static_cast<const Bits*>(data);
  // Blocks of 4096 with a branch-free OR of the test: the common all-finite case vectorizes.
  constexpr int64_t kBlock = 4096;
  for (int64_t begin = 0; begin < n; begin += kBlock) {
    const int64_t end = std::min(n, begin + kBlock);
    bool any = false;
    for (int64_t i = begin; i < end; ++i) any |= (bits[i] & exponent_mask) >= threshold;
    if (!any) continue;
    for (int64_t i = begin; i < end; ++i) {
      if ((bits[i] & exponent_mask) >= threshold) return i;
    }
  }
  return std::nullopt;
}

}  // namespace

std::optional<int64_t> first_non_finite(const TensorView& values) {
  return first_with_magnitude_at_least(values, 128);
}

std::optional<int64_t> first_with_magnitude_at_least(const TensorView& values, int exponent) {
  // Biased exponent fields: 127 + exponent, the same in f32 (bits 23-30) and bf16 (bits 7-14).
  const auto biased = static_cast<uint32_t>(std::clamp(127 + exponent, 0, 255));
  switch (values.dtype()) {
    case DType::kF32:
      return first_exponent_at_least<uint32_t>(values.raw(), values.numel(), 0x7f800000u,
                                               biased << 23);
    case DType::kBF16:
      return first_exponent_at_least<uint16_t>(values.raw(), values.numel(), uint16_t{0x7f80},
                                               static_cast<uint16_t>(biased << 7));
    default:
      return std::nullopt;
  }
}

}  // namespace maxctx

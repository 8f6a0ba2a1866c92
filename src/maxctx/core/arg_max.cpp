#include "maxctx/core/arg_max.h"

#include <algorithm>
#include <array>

#include "maxctx/core/check.h"

namespace maxctx {

int64_t first_arg_max(std::span<const float> values) {
  MAXCTX_CHECK(!values.empty(), "arg max of nothing");
  // The maximum first, then its first occurrence: the index std::max_element gives, several
  // times faster (the accuracy metric reads every logit of the step). Both passes work in blocks
  // of kLanes independent lanes, which the compiler turns into vector instructions (a single
  // running maximum would be a serial chain). ±0 compare equal, as in max_element; a leading
  // NaN, which max_element keeps and == never finds, goes to max_element itself.
  constexpr size_t kLanes = 16;
  const size_t n = values.size(), blocks = n / kLanes * kLanes;
  std::array<float, kLanes> lanes;
  lanes.fill(values[0]);
  for (size_t j = 0; j < blocks; j += kLanes) {
    for (size_t l = 0; l < kLanes; ++l) {
      lanes[l] = values[j + l] > lanes[l] ? values[j + l] : lanes[l];
    }
  }
  for (size_t j = blocks; j < n; ++j) lanes[0] = values[j] > lanes[0] ? values[j] : lanes[0];
  float best = lanes[0];
  for (const float v : lanes) best = v > best ? v : best;
  for (size_t j = 0; j < n; j += kLanes) {
    bool here = false;
    if (j + kLanes <= n) {
      for (size_t l = 0; l < kLanes; ++l) here |= values[j + l] == best;
    } else {
      here = true;
    }
    if (!here) continue;
    for (size_t l = j; l < std::min(n, j + kLanes); ++l) {
      if (values[l] == best) return static_cast<int64_t>(l);
    }
  }
  return std::max_element(values.begin(), values.end()) - values.begin();
}

}  // namespace maxctx

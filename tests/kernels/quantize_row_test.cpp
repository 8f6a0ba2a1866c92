// The vectorized int8 row quantizer (kernels/cpu/quantize_row.h) against its plain reference,
// ref::quantize_row_int8: codes and scale bit for bit, on rows of every length around the vector
// width, all-zero rows, exact half-way products (round half to even), values at the clamp and a
// row whose maximum is negative; both layouts (signed, and + 128 unsigned) and both level counts.
#include "maxctx/kernels/cpu/quantize_row.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <vector>

#include "maxctx/kernels/ref/int8.h"
#include "maxctx/kernels/types.h"

namespace maxctx::kernels {
namespace {

void expect_same_as_reference(const std::vector<float>& x, float levels, const std::string& what) {
  const auto n = static_cast<int64_t>(x.size());
  std::vector<int8_t> expected(x.size()), signed_codes(x.size());
  std::vector<uint8_t> offset_codes(x.size());
  const float scale = ref::quantize_row_int8(expected.data(), x.data(), n, levels);
  EXPECT_EQ(cpu::quantize_row_signed(signed_codes.data(), x.data(), n, levels), scale) << what;
  EXPECT_EQ(cpu::quantize_row_offset(offset_codes.data(), x.data(), n, levels), scale) << what;
  for (size_t i = 0; i < x.size(); ++i) {
    ASSERT_EQ(signed_codes[i], expected[i]) << what << " element " << i;
    ASSERT_EQ(offset_codes[i], static_cast<uint8_t>(expected[i] + 128)) << what << " element " << i;
  }
}

TEST(QuantizeRow, MatchesTheReferenceBitForBit) {
  std::mt19937 random(11);
  std::normal_distribution<float> normal(0.0f, 3.0f);
  for (const float levels : {kInt8Levels, kInt8KvLevels}) {
    for (int64_t n = 1; n <= 70; ++n) {
      std::vector<float> x(static_cast<size_t>(n));
      for (float& v : x) v = normal(random);
      expect_same_as_reference(x, levels, "random n=" + std::to_string(n));
      std::fill(x.begin(), x.end(), 0.0f);
      expect_same_as_reference(x, levels, "zeros n=" + std::to_string(n));
    }
    // Products that land exactly on .5 (max 127 with levels 127: x · 1 = x), negative maxima,
    // values at ±max and ties of |x|.
    std::vector<float> ties;
    for (int k = -130; k <= 130; ++k) ties.push_back(static_cast<float>(k) / 2.0f);
    expect_same_as_reference(ties, levels, "half-way products");
    std::vector<float> negative(37, -1.0f);
    negative[5] = -7.0f;
    negative[30] = 7.0f;
    expect_same_as_reference(negative, levels, "negative maximum and its mirror");
  }
}

}  // namespace
}  // namespace maxctx::kernels

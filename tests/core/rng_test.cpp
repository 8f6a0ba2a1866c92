#include "maxctx/core/rng.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

namespace maxctx {
namespace {

TEST(Rng, PhiloxKnownAnswer) {
  // Random123's published known-answer vectors for philox4x32-10.
  auto zero = rng::philox4x32(0, 0, 0);
  EXPECT_EQ(zero[0], 0x6627e8d5u);
  EXPECT_EQ(zero[1], 0xe169c58du);
  EXPECT_EQ(zero[2], 0xbc57ac4cu);
  EXPECT_EQ(zero[3], 0x9b00dbd8u);
  auto ones = rng::philox4x32(0xffffffffffffffffull, 0xffffffffffffffffull, 0xffffffffffffffffull);
  EXPECT_EQ(ones[0], 0x408f276du);
  EXPECT_EQ(ones[1], 0x41c83b0eu);
  EXPECT_EQ(ones[2], 0xa20bc7c6u);
  EXPECT_EQ(ones[3], 0x6d5451fdu);
}

TEST(Rng, AnySliceEqualsTheWholeTensor) {
  const uint64_t seed = 1234;
  const uint64_t stream = rng::stream_id("layers.0.attention.wq");
  std::vector<float> whole(1000);
  rng::fill_normal(whole, seed, stream, 0, 0.0f, 0.02f);
  // Four "ranks" each generate an uneven slice; together they must be bit-identical.
  const size_t bounds[] = {0, 137, 500, 501, 1000};
  for (int part = 0; part < 4; ++part) {
    std::vector<float> slice(bounds[part + 1] - bounds[part]);
    rng::fill_normal(slice, seed, stream, bounds[part], 0.0f, 0.02f);
    for (size_t i = 0; i < slice.size(); ++i) {
      ASSERT_EQ(slice[i], whole[bounds[part] + i]) << "part " << part << " element " << i;
    }
  }
}

TEST(Rng, DistributionsLookRight) {
  std::vector<float> normal(20000);
  rng::fill_normal(normal, 7, 1, 0, 0.0f, 1.0f);
  double sum = 0, sum_sq = 0;
  for (float v : normal) {
    sum += v;
    sum_sq += double(v) * v;
  }
  const double mean = sum / normal.size();
  EXPECT_NEAR(mean, 0.0, 0.03);
  EXPECT_NEAR(sum_sq / normal.size() - mean * mean, 1.0, 0.05);

  std::vector<float> uniform(20000);
  rng::fill_uniform(uniform, 7, 2, 0, -1.0f, 3.0f);
  for (float v : uniform) {
    ASSERT_GE(v, -1.0f);
    ASSERT_LT(v, 3.0f);
  }
  std::vector<int32_t> ints(20000);
  rng::fill_uniform_int(ints, 7, 3, 0, 10);
  std::vector<int> counts(10, 0);
  for (int32_t v : ints) {
    ASSERT_GE(v, 0);
    ASSERT_LT(v, 10);
    ++counts[v];
  }
  for (int c : counts) EXPECT_NEAR(c, 2000, 200);
  EXPECT_NE(rng::stream_id("a"), rng::stream_id("b"));
  EXPECT_NE(rng::u32_at(1, 2, 3), rng::u32_at(2, 2, 3));
}

}  // namespace
}  // namespace maxctx

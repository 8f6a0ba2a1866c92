// The sampler: greedy ties, the candidate sets of top-k and nucleus, the weighted frequencies
// against the softmax (a chi-square-sized tolerance over many independent draws), the draw as a
// pure function of (seed, slot, position), and the parameter errors.
#include "maxctx/infer/sampler.h"

#include <gtest/gtest.h>

#include <cmath>
#include <set>
#include <vector>

#include "maxctx/core/check.h"

namespace maxctx::infer {
namespace {

const std::vector<float> kLogits = {0.5f, 2.0f, -1.0f, 2.0f, 1.0f, 0.0f};

TEST(Sampler, GreedyTakesTheLowestIdAmongMaxima) {
  Sampler s(sampling_params("greedy", 1.0, 0, 1.0, 0));
  EXPECT_EQ(s.sample(kLogits.data(), 6, 0, 0), 1);
}

TEST(Sampler, TopKDrawsOnlyTheKLargest) {
  Sampler top1(sampling_params("topk", 1.0, 1, 1.0, 3));
  Sampler top3(sampling_params("topk", 1.0, 3, 1.0, 3));
  std::set<int32_t> seen;
  for (int64_t slot = 0; slot < 500; ++slot) {
    EXPECT_EQ(top1.sample(kLogits.data(), 6, slot, 9), 1);
    seen.insert(top3.sample(kLogits.data(), 6, slot, 9));
  }
  EXPECT_EQ(seen, (std::set<int32_t>{1, 3, 4}));
}

TEST(Sampler, NucleusKeepsTheSmallestSetReachingP) {
  // Probabilities ∝ e^{2}, e^{2}, e^{1}, ...: the two tied maxima hold 0.72 of the mass.
  Sampler nucleus(sampling_params("nucleus", 1.0, 0, 0.6, 5));
  Sampler tiny(sampling_params("nucleus", 1.0, 0, 1e-6, 5));
  std::set<int32_t> seen;
  for (int64_t slot = 0; slot < 500; ++slot) {
    seen.insert(nucleus.sample(kLogits.data(), 6, slot, 0));
    EXPECT_EQ(tiny.sample(kLogits.data(), 6, slot, 0), 1);
  }
  EXPECT_EQ(seen, (std::set<int32_t>{1, 3}));
}

TEST(Sampler, WeightedFrequenciesFollowTheTemperedSoftmax) {
  const double temperature = 0.7;
  Sampler s(sampling_params("weighted", temperature, 0, 1.0, 8));
  const int64_t draws = 40000;
  std::vector<int64_t> counts(6, 0);
  for (int64_t i = 0; i < draws; ++i) ++counts[s.sample(kLogits.data(), 6, i % 97, i / 97)];
  double total = 0.0;
  std::vector<double> p(6);
  for (int i = 0; i < 6; ++i) total += p[i] = std::exp(kLogits[i] / temperature);
  for (int i = 0; i < 6; ++i) {
    const double expected = draws * p[i] / total;
    // 5 standard deviations of a binomial count.
    EXPECT_NEAR(double(counts[i]), expected, 5.0 * std::sqrt(expected) + 1.0) << "token " << i;
  }
}

TEST(Sampler, DrawDependsOnlyOnSeedSlotAndPosition) {
  Sampler a(sampling_params("weighted", 1.0, 0, 1.0, 42));
  Sampler b(sampling_params("weighted", 1.0, 0, 1.0, 42));
  Sampler other_seed(sampling_params("weighted", 1.0, 0, 1.0, 43));
  int differ = 0;
  for (int64_t slot = 0; slot < 50; ++slot) {
    for (int64_t pos = 0; pos < 20; ++pos) {
      const int32_t t = a.sample(kLogits.data(), 6, slot, pos);
      EXPECT_EQ(t, b.sample(kLogits.data(), 6, slot, pos));
      differ += t != other_seed.sample(kLogits.data(), 6, slot, pos);
    }
  }
  EXPECT_GT(differ, 100);
}

TEST(Sampler, BadParametersAreErrorsNamingTheKey) {
  const auto message = [](auto make) {
    try {
      make();
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  EXPECT_NE(
      message([] { sampling_params("beam", 1.0, 0, 1.0, 0); }).find("decode_sampling_strategy"),
      std::string::npos);
  EXPECT_NE(message([] { sampling_params("topk", 1.0, 0, 1.0, 0); }).find("decode_sampling_top_k"),
            std::string::npos);
  EXPECT_NE(message([] {
              sampling_params("nucleus", 1.0, 0, -1.0, 0);
            }).find("decode_sampling_nucleus_p"),
            std::string::npos);
  EXPECT_NE(message([] {
              sampling_params("weighted", 0.0, 0, 1.0, 0);
            }).find("decode_sampling_temperature"),
            std::string::npos);
}

}  // namespace
}  // namespace maxctx::infer

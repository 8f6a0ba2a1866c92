// MaxText's warmup + cosine + zero schedule at its corners.
#include "maxctx/train/schedule.h"

#include <gtest/gtest.h>

#include <cmath>
#include <numbers>

#include "maxctx/config/config.h"
#include "maxctx/core/check.h"

namespace maxctx {
namespace {

TEST(Schedule, WarmupCosineThenZero) {
  // lr 1e-3 over 100 steps, 10% warmup (10 steps), final fraction 0.1 (1e-4).
  const LearningRateSchedule s = make_learning_rate_schedule(1e-3, 100, 0.1, 0.1);
  EXPECT_EQ(s.warmup_steps, 10);
  EXPECT_DOUBLE_EQ(learning_rate_at(s, 0), 0.0);  // the first update uses 0, as in MaxText
  EXPECT_DOUBLE_EQ(learning_rate_at(s, 1), 1e-4);
  EXPECT_DOUBLE_EQ(learning_rate_at(s, 5), 5e-4);
  EXPECT_DOUBLE_EQ(learning_rate_at(s, 10), 1e-3);    // warmup end = cosine start = peak
  EXPECT_DOUBLE_EQ(learning_rate_at(s, 55), 5.5e-4);  // half way: (peak + final) / 2
  // Last step: pct = 89/90, lr = 1e-3·a + 1e-4·(1 − a) with a = (1 + cos(π·89/90)) / 2.
  EXPECT_NEAR(learning_rate_at(s, 99), 1.0027412784140692e-4, 1e-17);
  EXPECT_DOUBLE_EQ(learning_rate_at(s, 100), 0.0);  // the constant-zero piece
  EXPECT_DOUBLE_EQ(learning_rate_at(s, 100000), 0.0);
  for (int64_t step = 11; step < 100; ++step) {
    EXPECT_LT(learning_rate_at(s, step), learning_rate_at(s, step - 1)) << step;
    EXPECT_GT(learning_rate_at(s, step), 1e-4) << step;
  }
}

TEST(Schedule, WarmupStepsAreTruncatedAndMayBeZero) {
  EXPECT_EQ(make_learning_rate_schedule(1.0, 15, 0.1, 0.0).warmup_steps, 1);  // floor(1.5)
  EXPECT_EQ(make_learning_rate_schedule(1.0, 19, 0.1, 0.0).warmup_steps, 1);
  const LearningRateSchedule no_warmup = make_learning_rate_schedule(2.0, 10, 0.0, 0.5);
  EXPECT_DOUBLE_EQ(learning_rate_at(no_warmup, 0), 2.0);
  EXPECT_DOUBLE_EQ(learning_rate_at(no_warmup, 5), 1.5);
  EXPECT_THROW(make_learning_rate_schedule(1.0, 10, 1.5, 0.1), Error);
}

TEST(Schedule, ReadsTheConfigKeys) {
  Config config;
  config.learning_rate = 3e-4;
  config.learning_rate_schedule_steps = 1000;
  config.warmup_steps_fraction = 0.05;
  config.cosine_learning_rate_final_fraction = 0.2;
  const LearningRateSchedule s = learning_rate_schedule(config);
  EXPECT_EQ(s.warmup_steps, 50);
  EXPECT_EQ(s.schedule_steps, 1000);
  EXPECT_DOUBLE_EQ(s.final_rate, 6e-5);
  EXPECT_DOUBLE_EQ(learning_rate_at(s, 25), 1.5e-4);
  const double a = 0.5 * (std::cos(std::numbers::pi * 475.0 / 950.0) + 1.0);
  EXPECT_DOUBLE_EQ(learning_rate_at(s, 525), 3e-4 * a + 6e-5 * (1 - a));
}

}  // namespace
}  // namespace maxctx

#include "maxctx/train/schedule.h"

#include <cmath>
#include <numbers>

#include "maxctx/config/config.h"
#include "maxctx/core/check.h"

namespace maxctx {

LearningRateSchedule make_learning_rate_schedule(double learning_rate, int64_t schedule_steps,
                                                 double warmup_steps_fraction,
                                                 double cosine_final_fraction) {
  if (schedule_steps < 0) fail("learning_rate_schedule_steps = {} must be >= 0", schedule_steps);
  if (!(warmup_steps_fraction >= 0.0 && warmup_steps_fraction <= 1.0)) {
    fail("warmup_steps_fraction = {} must be in [0, 1]", warmup_steps_fraction);
  }
  LearningRateSchedule schedule;
  schedule.learning_rate = learning_rate;
  schedule.final_rate = learning_rate * cosine_final_fraction;
  // Python's int() of a non-negative float truncates, like this cast.
  schedule.warmup_steps =
      static_cast<int64_t>(static_cast<double>(schedule_steps) * warmup_steps_fraction);
  schedule.schedule_steps = schedule_steps;
  return schedule;
}

LearningRateSchedule learning_rate_schedule(const Config& config) {
  return make_learning_rate_schedule(config.learning_rate, config.learning_rate_schedule_steps,
                                     config.warmup_steps_fraction,
                                     config.cosine_learning_rate_final_fraction);
}

double learning_rate_at(const LearningRateSchedule& schedule, int64_t step) {
  MAXCTX_CHECK_GE(step, int64_t{0}, "schedule steps count from 0");
  if (step >= schedule.schedule_steps) return 0.0;
  if (step < schedule.warmup_steps) {
    return schedule.learning_rate * static_cast<double>(step) /
           static_cast<double>(schedule.warmup_steps);
  }
  const int64_t cos_steps = schedule.schedule_steps - schedule.warmup_steps;  // > 0 here
  const double pct = static_cast<double>(step - schedule.warmup_steps) / cos_steps;
  const double a = 0.5 * (std::cos(std::numbers::pi * pct) + 1.0);
  return schedule.learning_rate * a + schedule.final_rate * (1.0 - a);
}

}  // namespace maxctx

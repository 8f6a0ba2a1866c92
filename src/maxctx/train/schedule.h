// MaxText's learning-rate schedule (maxtext_utils.create_learning_rate_schedule), exactly:
//
//   warmup_steps = floor(learning_rate_schedule_steps · warmup_steps_fraction)
//   step <  warmup:        lr · step / warmup_steps          (optax.linear_schedule from 0)
//   step <  schedule_steps: final + (lr − final) · ½(1 + cos(π · (step − warmup) / cos_steps))
//   step >= schedule_steps: 0                                (the constant-zero piece)
// with final = lr · cosine_learning_rate_final_fraction and cos_steps = schedule_steps − warmup.
// MaxText adds the zero piece only when steps > learning_rate_schedule_steps; without it the
// steps past the schedule are never reached, so "0 past the schedule" is the same function on
// every step a run takes. `step` is the optimizer's update count before the update (0 for the
// first update, which therefore uses lr = 0 when there is a warmup, as in MaxText).
#pragma once

#include <cstdint>

namespace maxctx {

struct Config;

struct LearningRateSchedule {
  double learning_rate = 0.0;  // peak
  double final_rate = 0.0;     // at the end of the cosine
  int64_t warmup_steps = 0;
  int64_t schedule_steps = 0;  // warmup + cosine
};

LearningRateSchedule make_learning_rate_schedule(double learning_rate, int64_t schedule_steps,
                                                 double warmup_steps_fraction,
                                                 double cosine_final_fraction);
// learning_rate, learning_rate_schedule_steps, warmup_steps_fraction,
// cosine_learning_rate_final_fraction (the config has already resolved the -1s).
LearningRateSchedule learning_rate_schedule(const Config& config);

double learning_rate_at(const LearningRateSchedule& schedule, int64_t step);

}  // namespace maxctx

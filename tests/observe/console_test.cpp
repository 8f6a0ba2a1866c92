// The quiet console (train/metrics.h): piped output gets MaxText's step line for the first
// step, every log_period-th and the last, with no terminal escape codes.
#include <gtest/gtest.h>

#include <string>

#include "maxctx/train/metrics.h"

namespace maxctx {
namespace {

TEST(Console, PipedOutputHasAStepLinePerLogPeriodAndNoEscapes) {
  MetricLoggerOptions options;
  options.total_steps = 7;
  options.flush_period = 3;
  options.tflops_per_device = 1.0;
  options.tokens_per_device = 100.0;
  ::testing::internal::CaptureStdout();
  {
    MetricLogger logger(options);
    for (int64_t step = 0; step < 7; ++step) {
      StepMetrics m;
      m.step = step;
      m.seconds = 0.5;
      m.loss = 1.0 + static_cast<double>(step);
      logger.log_step(m);
    }
  }
  const std::string out = ::testing::internal::GetCapturedStdout();
  EXPECT_EQ(out.find('\033'), std::string::npos);
  EXPECT_EQ(out.find('\r'), std::string::npos);
  std::string steps;
  for (size_t at = out.find("completed step: "); at != std::string::npos;
       at = out.find("completed step: ", at + 1)) {
    steps += out.substr(at + 16, out.find(',', at) - at - 16) + " ";
  }
  EXPECT_EQ(steps, "0 2 5 6 ") << out;  // first, (step + 1) % 3 == 0, last
  EXPECT_NE(out.find("loss: 7.000"), std::string::npos) << out;
}

}  // namespace
}  // namespace maxctx

#include "maxctx/train/profiler.h"

#include <fmt/format.h>

#include "maxctx/config/config.h"
#include "maxctx/core/check.h"
#include "maxctx/core/log.h"
#include "maxctx/core/trace.h"
#include "maxctx/io/trace_summary.h"
#include "maxctx/mesh/root_task.h"
#include "maxctx/mesh/trace_file.h"

namespace maxctx::train {

void check_trace_compiled_in(const std::string& profiler) {
  if (!MAXCTX_TRACE) {
    fail("profiler={}: this build has no trace spans (configured with -DMAXCTX_TRACE=OFF)",
         profiler);
  }
}

void write_profile(const Communicator& world, const std::filesystem::path& path,
                   const std::string& what) {
  write_trace(world, path);
  run_on_root(world, [&] {
    log::info("profiler: trace of {} in {}\n{}", what, path.string(),
              format_trace_summary(summarize_trace(path)));
  });
}

StepProfiler::StepProfiler(const Config& c, const Communicator& world,
                           std::filesystem::path trace_path, int64_t first_step)
    : world_(world), path_(std::move(trace_path)) {
  if (c.enable_jax_profiler) {
    log::warn(
        "enable_jax_profiler: maxctx has no on-demand profiler server; profiler=xplane traces a "
        "window of steps");
  }
  if (c.profiler.empty()) return;
  if (c.skip_first_n_steps_for_profiler < 0 || c.profiler_steps < 1) {
    fail("skip_first_n_steps_for_profiler = {} and profiler_steps = {}: need >= 0 and >= 1",
         c.skip_first_n_steps_for_profiler, c.profiler_steps);
  }
  check_trace_compiled_in(c.profiler);
  enabled_ = true;
  begin_ = first_step + c.skip_first_n_steps_for_profiler;
  end_ = begin_ + c.profiler_steps;
}

void StepProfiler::before_step(int64_t step) {
  if (!enabled_ || step != begin_) return;
  start_trace(world_);
  recording_ = true;
}

void StepProfiler::after_step(int64_t step) {
  if (!recording_) return;
  last_traced_ = step;
  if (step + 1 == end_) finish();
}

void StepProfiler::finish() {
  if (!recording_) return;
  recording_ = false;
  write_profile(world_, path_, fmt::format("steps {}..{}", begin_, last_traced_));
}

}  // namespace maxctx::train

// The profiled window of a training run, with MaxText's keys: `profiler` ("" off; "xplane", and
// "nsys" alike here), `skip_first_n_steps_for_profiler` steps after the run's first step (warm-up
// left out), then `profiler_steps` steps traced on every rank (core/trace.h) and written to
// <run dir>/trace.json, whose summary rank 0 prints (io/trace_summary.h).
//
// A run that ends inside the window writes what it traced. Off, it does nothing at all: the
// trainer then also runs on the plain kernels instead of the traced wrapper.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>

#include "maxctx/mesh/communicator.h"

namespace maxctx {
struct Config;
}

namespace maxctx::train {

// What every profiled run shares (this window of steps, and `decode`/`bench-inference`'s whole
// run, cli/common.h's run_profiled). Fails, naming `profiler`, in a build configured with
// -DMAXCTX_TRACE=OFF (no spans to record).
void check_trace_compiled_in(const std::string& profiler);
// Collective: stops recording, writes every rank's events to `path`, and logs on rank 0
// "profiler: trace of <what> in <path>" with the trace's summary.
void write_profile(const Communicator& world, const std::filesystem::path& path,
                   const std::string& what);

class StepProfiler {
 public:
  // `first_step`: the step the run starts at (a resumed run counts from its checkpoint).
  // Checks the keys (errors name them).
  StepProfiler(const Config& config, const Communicator& world, std::filesystem::path trace_path,
               int64_t first_step);

  bool enabled() const { return enabled_; }
  // Collective while profiling: called around every step with the step's 0-based index.
  void before_step(int64_t step);
  void after_step(int64_t step);
  // Collective: writes the trace if the window began and has not been written yet.
  void finish();

 private:
  bool enabled_ = false;
  bool recording_ = false;
  int64_t begin_ = 0, end_ = 0;  // steps [begin_, end_) are traced
  int64_t last_traced_ = 0;
  Communicator world_;
  std::filesystem::path path_;
};

}  // namespace maxctx::train

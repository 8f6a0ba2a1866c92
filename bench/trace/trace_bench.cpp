// What tracing costs. (1) One span, recording and not: batches of spans timed with
// steady_clock, the best batch's time per span. (2) Training steps of one model on one rank
// with profiler='' and profiler=xplane (every timed step traced: spans on every op, collective
// and layer), interleaved off/on repetitions, the median step time each: process CPU time (on a
// shared machine the robust figure for one rank: it counts only the time this process ran) and
// wall time beside it. run.sh runs the same binary from a -DMAXCTX_TRACE=OFF build too (there
// only profiler='' exists) and compares.
//   trace_bench --out FILE [--model M --seq S --steps N --reps R --run-dir DIR --config YML]
// Writes one JSON object.
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "maxctx/config/config.h"
#include "maxctx/core/trace.h"
#include "maxctx/mesh/runtime.h"
#include "train/train_support.h"

namespace {

using nlohmann::json;
namespace bench = maxctx::bench;
namespace trace = maxctx::trace;

struct Options {
  std::string config = std::string(MAXCTX_SOURCE_DIR) + "/configs/base.yml";
  std::string out;
  std::string run_dir = "trace_bench_runs";
  std::string model = "maxctx-tiny";  // small ops: the most spans per second of compute
  int64_t seq = 2048;
  int steps = 8;
  int reps = 3;
};

// Nanoseconds per span, the best of `batches` batches of `per_batch` spans.
double span_cost_ns(bool recording, int batches, int per_batch) {
  double best = 1e30;
  for (int b = 0; b < batches; ++b) {
    trace::start(trace::now_ns());  // clears the buffer: every batch appends to reserved memory
    if (!recording) trace::stop();
    const int64_t start = trace::now_ns();
    for (int i = 0; i < per_batch; ++i) {
      const trace::Span span("bench_span", trace::Category::kCompute, "axis", i);
    }
    best = std::min(best, static_cast<double>(trace::now_ns() - start) / per_batch);
  }
  trace::stop();
  return best;
}

bench::StepTimes step_seconds(const Options& o, bool profile, int rep) {
  std::vector<std::string> keys = {
      "model_name=" + o.model,
      "max_target_length=" + std::to_string(o.seq),
      "per_device_batch_size=1",
      "steps=" + std::to_string(1 + o.steps),
      "ici_fsdp_parallelism=1",
      "enable_checkpointing=false",
      "enable_tensorboard=false",
      "log_period=1000",
      "base_output_directory=" + o.run_dir,
      "run_name=" + std::string(profile ? "on_" : "off_") + std::to_string(rep)};
  if (profile) {
    keys.insert(keys.end(), {"profiler=xplane", "skip_first_n_steps_for_profiler=1",
                             "profiler_steps=" + std::to_string(o.steps)});
  }
  const maxctx::Config config = maxctx::load_config(o.config, keys, 1);
  const maxctx::Mesh mesh{maxctx::MeshSpec{}};
  maxctx::train::Trainer trainer(config, mesh, maxctx::kernels::backend(maxctx::Device::kCpu));
  return bench::time_training_steps(trainer, mesh, 1, o.steps);
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  if (argc % 2 == 0) {
    std::fprintf(stderr, "trace_bench: options come in pairs (--name value)\n");
    return 2;
  }
  bench::parse_flags(argc, argv, "trace_bench",
                     {{"--config", [&](const std::string& v) { o.config = v; }},
                      {"--out", [&](const std::string& v) { o.out = v; }},
                      {"--run-dir", [&](const std::string& v) { o.run_dir = v; }},
                      {"--model", [&](const std::string& v) { o.model = v; }},
                      {"--seq", [&](const std::string& v) { o.seq = std::stoll(v); }},
                      {"--steps", [&](const std::string& v) { o.steps = std::stoi(v); }},
                      {"--reps", [&](const std::string& v) { o.reps = std::stoi(v); }}});
  maxctx::MpiRuntime mpi(&argc, &argv);
  std::filesystem::create_directories(o.run_dir);
  const double load_start = bench::load_average_1min();
  json result = {{"trace_compiled_in", static_cast<bool>(MAXCTX_TRACE)},
                 {"model", o.model},
                 {"seq", o.seq},
                 {"timed_steps_per_rep", o.steps},
                 {"reps", o.reps}};
  if (MAXCTX_TRACE) {
    result["span_ns"] = {{"recording", span_cost_ns(true, 30, 16384)},
                         {"off", span_cost_ns(false, 30, 16384)}};
  }
  bench::StepTimes off, on;
  for (int rep = 0; rep < o.reps; ++rep) {
    off.append(step_seconds(o, false, rep));
    if (MAXCTX_TRACE) on.append(step_seconds(o, true, rep));
  }
  result["step_cpu_seconds_profiler_off"] = bench::time_summary(off.cpu);
  result["step_wall_seconds_profiler_off"] = bench::time_summary(off.wall);
  if (MAXCTX_TRACE) {
    result["step_cpu_seconds_profiler_on"] = bench::time_summary(on.cpu);
    result["step_wall_seconds_profiler_on"] = bench::time_summary(on.wall);
    result["on_vs_off_cpu_median"] = bench::median(on.cpu) / bench::median(off.cpu);
  }
  result["load_average"] = {{"start", load_start}, {"end", bench::load_average_1min()}};
  const std::string text = result.dump(2) + "\n";
  std::fputs(text.c_str(), stdout);
  if (!o.out.empty()) std::ofstream(o.out) << text;
  return 0;
}

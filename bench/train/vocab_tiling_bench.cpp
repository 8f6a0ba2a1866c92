// num_vocab_tiling (issue #31 part 4), measured in one run: a training step of maxctx-100m with a
// Llama 3 vocabulary (vocab_size=128256) at S = 4096 on one rank, untiled and in tiles, each in a
// fresh process: the step's peak RSS (VmHWM, reset after the Trainer is built, so the start's
// one-off copies do not count) and the step time (process CPU time, so neighbours on the shared
// cores do not tilt the ratio; wall time beside it).
// Reported against the untiled run: the fall of the peak, over the logits bytes tiling saves
// (N x V f32 less one tile's rows; the gradient is written in place of the logits, so there is
// no second buffer to save), and the step time ratio (target <= 1.05).
//
//   vocab_tiling_bench [--model maxctx-100m] [--seq 4096] [--vocab 128256] [--tiles 1,8,16]
//                      [--timed-steps 2] [--prefix "taskset -c 1"] [--out f.json]
// Child mode (run by the parent): --child.
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "maxctx/config/config.h"
#include "maxctx/mesh/runtime.h"
#include "train/train_support.h"

namespace {

using nlohmann::json;
namespace bench = maxctx::bench;

struct Options {
  std::string config = std::string(MAXCTX_SOURCE_DIR) + "/configs/base.yml";
  std::string out;
  std::string run_dir = "vocab_tiling_bench_runs";
  std::string model = "maxctx-100m";
  int64_t seq = 4096;
  int64_t vocab = 128256;
  std::vector<int64_t> tiles = {1, 8, 16};
  int timed_steps = 2;
  std::string prefix;  // e.g. "taskset -c 1": pins the children
};

// /proc/self/status's VmHWM (the peak resident set), in bytes.
double vm_hwm_bytes() {
  std::ifstream in("/proc/self/status");
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("VmHWM:", 0) == 0) return 1024.0 * std::stod(line.substr(6));
  }
  return -1;
}

// The peak resident set starts again from what is resident now (Linux >= 4.0).
void reset_peak_rss() { std::ofstream("/proc/self/clear_refs") << "5"; }

// --child <config> <model> <seq> <vocab> <tiles> <timed steps> <run dir> <out>: one rank.
int child(int argc, char** argv) {
  maxctx::MpiRuntime mpi(&argc, &argv);
  const std::string tiles = argv[6];
  const int timed = std::stoi(argv[7]);
  const maxctx::Config config = maxctx::load_config(
      argv[2],
      {"model_name=" + std::string(argv[3]), "override_model_config=true",
       "vocab_size=" + std::string(argv[5]), "max_target_length=" + std::string(argv[4]),
       "per_device_batch_size=1", "steps=" + std::to_string(1 + timed),
       "enable_checkpointing=false", "log_period=1000", "num_vocab_tiling=" + tiles,
       "base_output_directory=" + std::string(argv[8]), "run_name=vocab_tiling_" + tiles},
      1);
  const maxctx::Mesh mesh{maxctx::MeshSpec{}};
  maxctx::train::Trainer trainer(config, mesh, maxctx::kernels::backend(maxctx::Device::kCpu));
  reset_peak_rss();
  const double cpu_start = bench::process_cpu_seconds();
  const double wall_start = bench::wall_seconds();
  trainer.run(1);
  const double first_cpu = bench::process_cpu_seconds() - cpu_start;
  const double first_wall = bench::wall_seconds() - wall_start;
  json out = {{"step_peak_rss_bytes", vm_hwm_bytes()},
              {"loss", trainer.history().back().loss},
              {"first_step_cpu_seconds", first_cpu},
              {"first_step_wall_seconds", first_wall}};
  if (timed > 0) {
    const bench::StepTimes times = bench::time_training_steps(trainer, mesh, 0, timed);
    out["step_wall_seconds"] = bench::time_summary(times.wall);
    out["step_cpu_seconds"] = bench::time_summary(times.cpu);
  }
  std::ofstream(argv[9]) << out.dump() << "\n";
  return 0;
}

json read_json(const std::string& path) {
  std::ifstream in(path);
  return json::parse(in);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc > 1 && std::string(argv[1]) == "--child") return child(argc, argv);
  Options o;
  bench::parse_flags(
      argc, argv, "vocab_tiling_bench",
      {{"--config", [&](const std::string& v) { o.config = v; }},
       {"--out", [&](const std::string& v) { o.out = v; }},
       {"--run-dir", [&](const std::string& v) { o.run_dir = v; }},
       {"--model", [&](const std::string& v) { o.model = v; }},
       {"--seq", [&](const std::string& v) { o.seq = std::stoll(v); }},
       {"--vocab", [&](const std::string& v) { o.vocab = std::stoll(v); }},
       {"--tiles", [&](const std::string& v) { o.tiles = bench::split_ints(v); }},
       {"--timed-steps", [&](const std::string& v) { o.timed_steps = std::stoi(v); }},
       {"--prefix", [&](const std::string& v) { o.prefix = v; }}});
  std::filesystem::create_directories(o.run_dir);
  const double logits_bytes = static_cast<double>(o.seq) * static_cast<double>(o.vocab) * 4.0;
  json runs = json::object();
  double base_peak = 0, base_cpu = 0, base_loss = 0;
  for (const int64_t t : o.tiles) {
    const std::string out = o.run_dir + "/tiles" + std::to_string(t) + ".json";
    const std::string command = o.prefix + " " + argv[0] + " --child " + o.config + " " + o.model +
                                " " + std::to_string(o.seq) + " " + std::to_string(o.vocab) + " " +
                                std::to_string(t) + " " + std::to_string(o.timed_steps) + " " +
                                o.run_dir + " " + out;
    if (std::system(command.c_str()) != 0) {
      std::fprintf(stderr, "vocab_tiling_bench: '%s' failed\n", command.c_str());
      return 1;
    }
    json run = read_json(out);
    const double peak = run["step_peak_rss_bytes"].get<double>();
    const double cpu = o.timed_steps > 0 ? run["step_cpu_seconds"]["min"].get<double>()
                                         : run["first_step_cpu_seconds"].get<double>();
    run["num_vocab_tiling"] = t;
    run["logits_buffer_bytes"] = logits_bytes / static_cast<double>(t);
    if (t == 1) {
      base_peak = peak;
      base_cpu = cpu;
      base_loss = run["loss"].get<double>();
    } else if (base_peak > 0) {
      const double saved = logits_bytes - logits_bytes / static_cast<double>(t);
      run["peak_fall_bytes"] = base_peak - peak;
      run["logits_bytes_saved"] = saved;
      run["peak_fall_over_logits_bytes_saved"] = (base_peak - peak) / saved;
      run["peak_ratio_vs_untiled"] = peak / base_peak;
      run["step_cpu_time_ratio_vs_untiled"] = cpu / base_cpu;
      run["meets_step_time_target"] = cpu / base_cpu <= 1.05;
      run["loss_equals_untiled"] = run["loss"].get<double>() == base_loss;
    }
    std::fprintf(stderr, "num_vocab_tiling=%lld: peak %.0f MB, step %.2f s CPU\n",
                 static_cast<long long>(t), peak / 1e6, cpu);
    runs["tiles" + std::to_string(t)] = run;
  }
  const json result = {{"model", o.model},
                       {"seq", o.seq},
                       {"vocab_size", o.vocab},
                       {"tokens", o.seq},
                       {"untiled_logits_bytes", logits_bytes},
                       {"step_time_target_ratio", 1.05},
                       {"step_time_measure", "process CPU seconds, min over timed steps"},
                       {"load_average_1min", bench::load_average_1min()},
                       {"runs", runs}};
  const std::string text = result.dump(2);
  std::printf("%s\n", text.c_str());
  if (!o.out.empty()) std::ofstream(o.out) << text << "\n";
  return 0;
}

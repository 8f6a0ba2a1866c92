// bf16 against fp32 training on one rank and one thread, measured in one run: real Trainer
// steps of maxctx-20m and maxctx-100m at S = 2048 with dtype/weight_dtype = float32/float32,
// bfloat16/float32 (MaxText's mixed precision) and bfloat16/bfloat16, as tokens per second and
// their ratio to fp32 (target: >= 1.7x); and the peak resident memory of one training step with
// weight_dtype = float32 and bfloat16 (both at dtype = bfloat16), each in a child process of its
// own, since a process's high-water mark only grows, next to the parameter and optimizer bytes
// the run holds in each dtype (expected: halved).
//
//   precision_bench [--models a,b] [--seq S] [--steps N] [--out file.json]
//   precision_bench --rss-child <model> <seq> <dtype> <weight_dtype> <config> <run dir> <out>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "maxctx/config/config.h"
#include "maxctx/mesh/runtime.h"
#include "maxctx/model/llama_config.h"
#include "maxctx/train/metrics.h"
#include "train/train_support.h"

namespace {

using nlohmann::json;
namespace bench = maxctx::bench;
namespace fs = std::filesystem;

struct Options {
  std::string config = std::string(MAXCTX_SOURCE_DIR) + "/configs/base.yml";
  std::string out;
  std::string run_dir = "precision_bench_runs";
  std::vector<std::string> models = {"maxctx-20m", "maxctx-100m"};
  int64_t seq = 2048;
  int steps = 2;
};

maxctx::Config training_config(const std::string& base, const std::string& model, int64_t seq,
                               const std::string& dtype, const std::string& weight_dtype,
                               int64_t steps, const std::string& run_dir) {
  return maxctx::load_config(
      base,
      {"model_name=" + model, "max_target_length=" + std::to_string(seq), "per_device_batch_size=1",
       "steps=" + std::to_string(steps), "ici_fsdp_parallelism=1", "enable_checkpointing=false",
       "log_period=1000", "dtype=" + dtype, "weight_dtype=" + weight_dtype,
       "base_output_directory=" + run_dir, "run_name=" + model + "_" + dtype + "_" + weight_dtype},
      1);
}

// One step's peak RSS for a (dtype, weight_dtype), in this process: the --rss-child mode.
int rss_child(int argc, char** argv) {
  maxctx::MpiRuntime mpi(&argc, &argv);
  const std::string model = argv[2], dtype = argv[4], weight_dtype = argv[5];
  const maxctx::Config config =
      training_config(argv[6], model, std::stoll(argv[3]), dtype, weight_dtype, 1, argv[7]);
  const maxctx::Mesh mesh{maxctx::MeshSpec{}};
  maxctx::train::Trainer trainer(config, mesh, maxctx::kernels::backend(maxctx::Device::kCpu));
  trainer.run(1);
  std::ofstream(argv[8]) << json{{"peak_rss_bytes", bench::peak_rss_bytes()}}.dump() << "\n";
  return 0;
}

double child_peak_rss(const Options& o, const char* self, const std::string& model,
                      const std::string& weight_dtype) {
  const std::string out = o.run_dir + "/rss_" + model + "_" + weight_dtype + ".json";
  const std::string command = std::string(self) + " --rss-child " + model + " " +
                              std::to_string(o.seq) + " bfloat16 " + weight_dtype + " " + o.config +
                              " " + o.run_dir + " " + out;
  if (std::system(command.c_str()) != 0) {
    std::fprintf(stderr, "precision_bench: '%s' failed\n", command.c_str());
    std::exit(1);
  }
  std::ifstream in(out);
  return json::parse(in)["peak_rss_bytes"].get<double>();
}

}  // namespace

int main(int argc, char** argv) {
  if (argc >= 9 && std::string(argv[1]) == "--rss-child") return rss_child(argc, argv);
  Options o;
  bench::parse_flags(
      argc, argv, "precision_bench",
      {{"--config", [&](const std::string& v) { o.config = v; }},
       {"--out", [&](const std::string& v) { o.out = v; }},
       {"--run-dir", [&](const std::string& v) { o.run_dir = v; }},
       {"--models", [&](const std::string& v) { o.models = bench::split_commas(v); }},
       {"--seq", [&](const std::string& v) { o.seq = std::stoll(v); }},
       {"--steps", [&](const std::string& v) { o.steps = std::stoi(v); }}});
  fs::create_directories(o.run_dir);
  const double load_start = bench::load_average_1min();
  // The children run before this process starts MPI, so that each is a fresh singleton.
  std::map<std::string, std::pair<double, double>> rss;  // model -> (f32, bf16 weights)
  for (const std::string& model : o.models) {
    rss[model] = {child_peak_rss(o, argv[0], model, "float32"),
                  child_peak_rss(o, argv[0], model, "bfloat16")};
  }
  maxctx::MpiRuntime mpi(&argc, &argv);
  const std::vector<std::pair<std::string, std::string>> precisions = {
      {"float32", "float32"}, {"bfloat16", "float32"}, {"bfloat16", "bfloat16"}};
  json models = json::object();
  for (const std::string& model : o.models) {
    json runs = json::object();
    double fp32_tokens_per_s = 0;
    for (const auto& [dtype, weight_dtype] : precisions) {
      const maxctx::Config config =
          training_config(o.config, model, o.seq, dtype, weight_dtype, 1 + o.steps, o.run_dir);
      const maxctx::Mesh mesh{maxctx::MeshSpec{}};
      maxctx::train::Trainer trainer(config, mesh, maxctx::kernels::backend(maxctx::Device::kCpu));
      const bench::StepTimes times = bench::time_training_steps(trainer, mesh, 1, o.steps);
      const double best = *std::min_element(times.wall.begin(), times.wall.end());
      const double tokens_per_s = static_cast<double>(o.seq) / best;
      if (dtype == "float32") fp32_tokens_per_s = tokens_per_s;
      const double speedup = tokens_per_s / fp32_tokens_per_s;
      json run = {{"step_wall_seconds", bench::time_summary(times.wall)},
                  {"tokens_per_second", tokens_per_s},
                  {"speedup_vs_float32", speedup},
                  {"final_loss", trainer.history().back().loss}};
      if (dtype != "float32") {
        run["target_speedup"] = 1.7;
        run["meets_target"] = speedup >= 1.7;
      }
      runs[dtype + "/" + weight_dtype] = run;
      std::fprintf(stderr, "%s %s/%s: %.0f tokens/s (%.2fx fp32)\n", model.c_str(), dtype.c_str(),
                   weight_dtype.c_str(), tokens_per_s, speedup);
    }
    const int64_t parameters =
        maxctx::model::llama_config_from(
            training_config(o.config, model, o.seq, "float32", "float32", 1, o.run_dir))
            .num_parameters();
    const auto [rss_f32, rss_bf16] = rss[model];
    // Parameters (the full buffer the model reads), master shard, two AdamW moments.
    const double state_f32 = 4.0 * 4 * parameters, state_bf16 = 4.0 * 2 * parameters;
    models[model] = {
        {"parameters", parameters},
        {"seq", o.seq},
        {"precisions", runs},
        {"peak_rss",
         {{"note",
           "one training step at dtype=bfloat16 in a child process each; parameter + optimizer "
           "bytes are the model's full weights, the master shard and both AdamW moments"},
          {"weight_dtype_float32_bytes", rss_f32},
          {"weight_dtype_bfloat16_bytes", rss_bf16},
          {"saved_bytes", rss_f32 - rss_bf16},
          {"parameter_optimizer_bytes_float32", state_f32},
          {"parameter_optimizer_bytes_bfloat16", state_bf16},
          {"expected_saving_bytes", state_f32 - state_bf16},
          {"saving_vs_expected", (rss_f32 - rss_bf16) / (state_f32 - state_bf16)}}}};
  }
  const json out = {{"benchmark", "precision_bench"},
                    {"ranks", 1},
                    {"threads", 1},
                    {"timing_note", "best wall time of the timed steps after one warm-up step"},
                    {"models", models},
                    {"load_average_1min_at_start", load_start},
                    {"load_average_1min_at_end", bench::load_average_1min()}};
  if (o.out.empty()) {
    std::printf("%s\n", out.dump(2).c_str());
  } else {
    std::ofstream(o.out) << out.dump(2) << "\n";
  }
  return 0;
}

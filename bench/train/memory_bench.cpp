// Training memory (issue #18 parts 5 and 6), measured in one run:
//
//  - fsdp: one step of maxctx-100m on fsdp = 1, 2 and 4 ranks (one mpirun each): per rank the
//    parameter + gradient + optimizer bytes held (the shards, exact, plus the most the gathered
//    units held at once, counted in resident pages by ShardedParameters) and the step's peak
//    RSS (VmHWM, reset after the Trainer is built, so the initialisation's one-off host copies
//    of the whole model do not count). Targets: fsdp=2 <= 0.55x fsdp=1, fsdp=4 <= 0.3x.
//  - remat: one rank, remat_policy none / minimal / full, the peak RSS of a step at a few S
//    (fresh process each); a least-squares line through them gives bytes per token, compared
//    with the formula (model::activation_bytes_per_token), and the longest S that fits a
//    20 GiB budget; the step time of each policy at the largest S (target: full >= 3x none in S,
//    full <= 1.4x none in time). The predicted S is not run: one step at S ~ 30K..100K takes
//    tens of minutes to hours on this machine's cores.
//
//   memory_bench [--fsdp 1,2,4] [--fsdp-seq S] [--seqs a,b,c] [--budget-gib G]
//                [--remat-prefix "taskset -c 1"] [--out f.json]
// Child modes (run by the parent): --fsdp-child, --remat-child.
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "maxctx/config/config.h"
#include "maxctx/mesh/runtime.h"
#include "maxctx/model/activations.h"
#include "maxctx/model/llama_config.h"
#include "maxctx/model/remat.h"
#include "train/train_support.h"

namespace {

using nlohmann::json;
namespace bench = maxctx::bench;
namespace fs = std::filesystem;

struct Options {
  std::string config = std::string(MAXCTX_SOURCE_DIR) + "/configs/base.yml";
  std::string out;
  std::string run_dir = "memory_bench_runs";
  std::string model = "maxctx-100m";
  std::vector<int64_t> fsdp = {1, 2, 4};
  int64_t fsdp_seq = 256;
  std::vector<int64_t> seqs = {256, 512, 1024};
  std::vector<std::string> policies = {"none", "minimal", "full"};
  double budget_gib = 20.0;
  int timed_steps = 2;
  std::string remat_prefix;  // e.g. "taskset -c 1": pins the timed one-rank children
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

maxctx::Config training_config(const std::string& base, const std::string& model, int64_t seq,
                               int64_t fsdp, const std::string& remat, int64_t steps,
                               const std::string& run_dir, int world) {
  return maxctx::load_config(
      base,
      {"model_name=" + model, "max_target_length=" + std::to_string(seq), "per_device_batch_size=1",
       "steps=" + std::to_string(steps), "ici_fsdp_parallelism=" + std::to_string(fsdp),
       "enable_checkpointing=false", "log_period=1000", "remat_policy=" + remat,
       "base_output_directory=" + run_dir, "run_name=memory_" + remat + "_" + std::to_string(seq)},
      world);
}

void run_child(const std::string& command) {
  if (std::system(command.c_str()) != 0) {
    std::fprintf(stderr, "memory_bench: '%s' failed\n", command.c_str());
    std::exit(1);
  }
}

json read_json(const std::string& path) {
  std::ifstream in(path);
  return json::parse(in);
}

// --fsdp-child <config> <model> <seq> <run dir> <out>: one step on every rank of the world.
int fsdp_child(int argc, char** argv) {
  maxctx::MpiRuntime mpi(&argc, &argv);
  const maxctx::Communicator world = maxctx::Communicator::world();
  const maxctx::Config config = training_config(argv[2], argv[3], std::stoll(argv[4]), world.size(),
                                                "full", 1, argv[5], world.size());
  const maxctx::Mesh mesh = bench::mesh_of(config);
  maxctx::train::Trainer trainer(config, mesh, maxctx::kernels::backend(maxctx::Device::kCpu));
  trainer.track_parameter_memory();
  reset_peak_rss();
  trainer.run(1);
  const maxctx::train::ParameterMemory m = trainer.parameter_memory();
  double mine[3] = {static_cast<double>(m.shard_bytes), static_cast<double>(m.peak_unit_bytes),
                    vm_hwm_bytes()};
  std::vector<double> all(3 * world.size());
  world.all_gather(std::span<const double>(mine, 3), std::span<double>(all));
  if (world.rank() == 0) {
    json ranks = json::array();
    for (int r = 0; r < world.size(); ++r) {
      const double* x = all.data() + 3 * r;
      ranks.push_back({{"shard_bytes", x[0]},
                       {"peak_gathered_unit_bytes", x[1]},
                       {"parameter_gradient_optimizer_bytes", x[0] + x[1]},
                       {"step_peak_rss_bytes", x[2]}});
    }
    std::ofstream(argv[6]) << json{{"ranks", ranks}}.dump() << "\n";
  }
  return 0;
}

// --remat-child <config> <model> <seq> <policy> <timed steps> <run dir> <out>: one rank.
int remat_child(int argc, char** argv) {
  maxctx::MpiRuntime mpi(&argc, &argv);
  const int timed = std::stoi(argv[6]);
  const maxctx::Config config =
      training_config(argv[2], argv[3], std::stoll(argv[4]), 1, argv[5], 1 + timed, argv[7], 1);
  const maxctx::Mesh mesh{maxctx::MeshSpec{}};
  maxctx::train::Trainer trainer(config, mesh, maxctx::kernels::backend(maxctx::Device::kCpu));
  reset_peak_rss();
  trainer.run(1);
  const double peak = vm_hwm_bytes();
  json out = {{"step_peak_rss_bytes", peak}, {"loss", trainer.history().back().loss}};
  if (timed > 0) {
    const bench::StepTimes times = bench::time_training_steps(trainer, mesh, 0, timed);
    out["step_wall_seconds"] = bench::time_summary(times.wall);
    out["step_cpu_seconds"] = bench::time_summary(times.cpu);
  }
  std::ofstream(argv[8]) << out.dump() << "\n";
  return 0;
}

// Least squares y = a + b·x.
std::pair<double, double> fit_line(const std::vector<double>& x, const std::vector<double>& y) {
  const double n = static_cast<double>(x.size());
  double sx = 0, sy = 0, sxx = 0, sxy = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    sx += x[i];
    sy += y[i];
    sxx += x[i] * x[i];
    sxy += x[i] * y[i];
  }
  const double slope = (n * sxy - sx * sy) / (n * sxx - sx * sx);
  return {(sy - slope * sx) / n, slope};
}

json fsdp_section(const Options& o, const char* self) {
  json runs = json::object();
  double base = 0;
  for (const int64_t f : o.fsdp) {
    const std::string out = o.run_dir + "/fsdp" + std::to_string(f) + ".json";
    run_child(
        "mpirun --allow-run-as-root --oversubscribe -x OMP_NUM_THREADS=1 -x "
        "OPENBLAS_NUM_THREADS=1 -np " +
        std::to_string(f) + " " + self + " --fsdp-child " + o.config + " " + o.model + " " +
        std::to_string(o.fsdp_seq) + " " + o.run_dir + " " + out);
    json run = read_json(out);
    double worst = 0, worst_rss = 0;
    for (const json& r : run["ranks"]) {
      worst = std::max(worst, r["parameter_gradient_optimizer_bytes"].get<double>());
      worst_rss = std::max(worst_rss, r["step_peak_rss_bytes"].get<double>());
    }
    if (f == 1) base = worst;
    run["parameter_gradient_optimizer_bytes_max_rank"] = worst;
    run["step_peak_rss_bytes_max_rank"] = worst_rss;
    if (base > 0) run["ratio_vs_fsdp1"] = worst / base;
    const double target = f == 2 ? 0.55 : f == 4 ? 0.3 : 0;
    if (target > 0 && base > 0) {
      run["target_ratio"] = target;
      run["meets_target"] = worst / base <= target;
    }
    std::fprintf(stderr, "fsdp=%lld: %.1f MB param+grad+optimizer per rank (%.3fx fsdp=1)\n",
                 static_cast<long long>(f), worst / 1e6, base > 0 ? worst / base : 0.0);
    runs["fsdp" + std::to_string(f)] = run;
  }
  return {{"model", o.model}, {"seq", o.fsdp_seq}, {"runs", runs}};
}

json remat_section(const Options& o, const char* self) {
  const maxctx::model::LlamaConfig model = maxctx::model::llama_config_from(
      training_config(o.config, o.model, o.seqs.back(), 1, "none", 1, o.run_dir, 1));
  const double budget = o.budget_gib * 1024.0 * 1024.0 * 1024.0;
  json policies = json::object();
  std::map<std::string, double> longest, step_seconds;
  for (const std::string& policy : o.policies) {
    std::vector<double> xs, ys;
    json points = json::array();
    json timing;
    for (const int64_t seq : o.seqs) {
      const bool timed = seq == o.seqs.back();
      const std::string out = o.run_dir + "/remat_" + policy + "_" + std::to_string(seq) + ".json";
      run_child(o.remat_prefix + " " + self + " --remat-child " + o.config + " " + o.model + " " +
                std::to_string(seq) + " " + policy + " " +
                std::to_string(timed ? o.timed_steps : 0) + " " + o.run_dir + " " + out);
      const json r = read_json(out);
      xs.push_back(static_cast<double>(seq));
      ys.push_back(r["step_peak_rss_bytes"].get<double>());
      points.push_back({{"seq", seq}, {"step_peak_rss_bytes", ys.back()}});
      if (timed) timing = r;
    }
    const auto [intercept, slope] = fit_line(xs, ys);
    const maxctx::model::ActivationBytes formula =
        maxctx::model::activation_bytes_per_token(model, maxctx::model::remat_policy_from(policy));
    // Untiled (num_vocab_tiling 1): every token's logits row counts.
    const int64_t other_per_token = formula.other_per_token + formula.logits_per_row;
    const double formula_per_token =
        static_cast<double>(formula.layers_per_token + other_per_token);
    longest[policy] = (budget - intercept) / slope;
    // Process CPU time: on one rank it counts only the time this process ran, so neighbours on
    // the shared cores do not tilt the ratio.
    step_seconds[policy] = timing["step_cpu_seconds"]["min"].get<double>();
    policies[policy] = {
        {"points", points},
        {"measured_bytes_per_token", slope},
        {"measured_fixed_bytes", intercept},
        {"formula_bytes_per_token", formula_per_token},
        {"formula_layers_bytes_per_token", formula.layers_per_token},
        {"formula_other_bytes_per_token", other_per_token},
        {"measured_over_formula", slope / formula_per_token},
        {"predicted_longest_seq_in_budget", longest[policy]},
        {"step_at_seq", o.seqs.back()},
        {"step_wall_seconds", timing["step_wall_seconds"]},
        {"step_cpu_seconds", timing["step_cpu_seconds"]},
    };
    std::fprintf(stderr, "remat %s: %.0f B/token measured, %.0f formula; longest S %.0f; %.2f s\n",
                 policy.c_str(), slope, formula_per_token, longest[policy], step_seconds[policy]);
  }
  json result = {{"model", o.model}, {"budget_gib", o.budget_gib}, {"policies", policies}};
  if (longest.count("none") && longest.count("full")) {
    const double s_ratio = longest["full"] / longest["none"];
    const double t_ratio = step_seconds["full"] / step_seconds["none"];
    result["full_over_none_longest_seq"] = s_ratio;
    result["full_over_none_step_time"] = t_ratio;  // step CPU time, min over the timed steps
    result["target_longest_seq_ratio"] = 3.0;
    result["target_step_time_ratio"] = 1.4;
    result["meets_longest_seq_target"] = s_ratio >= 3.0;
    result["meets_step_time_target"] = t_ratio <= 1.4;
    if (longest.count("minimal")) {
      result["minimal_over_none_longest_seq"] = longest["minimal"] / longest["none"];
      result["minimal_over_none_step_time"] = step_seconds["minimal"] / step_seconds["none"];
    }
  }
  result["note"] =
      "peak RSS of one step per (policy, S), each in a fresh process, fitted to a line; the "
      "longest S is the line's prediction for the budget, not a run at that S";
  return result;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc >= 7 && std::string(argv[1]) == "--fsdp-child") return fsdp_child(argc, argv);
  if (argc >= 9 && std::string(argv[1]) == "--remat-child") return remat_child(argc, argv);
  Options o;
  bench::parse_flags(
      argc, argv, "memory_bench",
      {{"--config", [&](const std::string& v) { o.config = v; }},
       {"--out", [&](const std::string& v) { o.out = v; }},
       {"--run-dir", [&](const std::string& v) { o.run_dir = v; }},
       {"--fsdp", [&](const std::string& v) { o.fsdp = bench::split_ints(v); }},
       {"--fsdp-seq", [&](const std::string& v) { o.fsdp_seq = std::stoll(v); }},
       {"--seqs", [&](const std::string& v) { o.seqs = bench::split_ints(v); }},
       {"--budget-gib", [&](const std::string& v) { o.budget_gib = std::stod(v); }},
       {"--remat-prefix", [&](const std::string& v) { o.remat_prefix = v; }},
       {"--timed-steps", [&](const std::string& v) { o.timed_steps = std::stoi(v); }}});
  fs::create_directories(o.run_dir);
  o.run_dir = fs::absolute(o.run_dir).string();
  const double load_start = bench::load_average_1min();
  json result = {
      {"benchmark", "train_memory"},
      {"fsdp", fsdp_section(o, argv[0])},
      {"remat", remat_section(o, argv[0])},
      {"load_average_1min", {{"start", load_start}, {"end", bench::load_average_1min()}}}};
  const std::string text = result.dump(2);
  std::printf("%s\n", text.c_str());
  if (!o.out.empty()) std::ofstream(o.out) << text << "\n";
  return 0;
}

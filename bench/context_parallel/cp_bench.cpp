// Context-parallelism benchmark pieces; run.sh calls this binary several times and
// combine.py merges the pieces into build/bench/context_parallel.json.
//
//  --mode attention (cp = world size): one attention layer of maxctx-small's shape (Hq = 8,
//    Hkv = 2, D = 32, causal, one sequence of --seq tokens), forward and backward, with
//    context_parallel_load_balance on and off. Per rank: the tiles computed (AttentionStats)
//    and the CPU time of the kernels the all_gather plan runs (this rank's queries against the
//    whole gathered sequence), timed directly because the plan's closing reduce-scatter makes
//    every rank wait for the slowest; then both plans' wall time from a barrier (the slowest
//    rank's, which is what a step pays) with their own tile counts.
//  --mode step (cp = world size): Trainer steps of --model at --seq with --strategy: step
//    times after --warmup steps, per-rank peak RSS (getrusage) and attention tiles.
// Every piece records the load average: the machine is shared, so times are the best of
// several repetitions.
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "maxctx/config/config.h"
#include "maxctx/core/rng.h"
#include "maxctx/kernels/cpu/attention.h"
#include "maxctx/mesh/runtime.h"
#include "maxctx/parallel/context_attention.h"
#include "maxctx/parallel/load_balance.h"
#include "maxctx/train/metrics.h"
#include "train/train_support.h"

namespace {

using maxctx::Axis;
using maxctx::kernels::AttentionParams;
using maxctx::kernels::AttentionStats;
using nlohmann::json;
namespace bench = maxctx::bench;

maxctx::TensorView view(const std::vector<float>& values) {
  return maxctx::TensorView::of(values.data(), static_cast<int64_t>(values.size()));
}

struct Options {
  std::string mode;
  std::string config = std::string(MAXCTX_SOURCE_DIR) + "/configs/base.yml";
  std::string out;
  std::string run_dir = "cp_bench_runs";
  std::string model_name = "maxctx-small";
  std::string strategy = "all_gather";
  std::vector<std::string> extra;  // further key=value overrides for --mode step
  int64_t seq = 16384;
  int warmup = 1;
  int steps = 2;
  int reps = 3;
};

Options parse(int argc, char** argv) {
  Options o;
  bench::parse_flags(argc, argv, "cp_bench",
                     {{"--mode", [&](const std::string& v) { o.mode = v; }},
                      {"--config", [&](const std::string& v) { o.config = v; }},
                      {"--out", [&](const std::string& v) { o.out = v; }},
                      {"--run-dir", [&](const std::string& v) { o.run_dir = v; }},
                      {"--model", [&](const std::string& v) { o.model_name = v; }},
                      {"--strategy", [&](const std::string& v) { o.strategy = v; }},
                      {"--set", [&](const std::string& v) { o.extra.push_back(v); }},
                      {"--seq", [&](const std::string& v) { o.seq = std::stoll(v); }},
                      {"--warmup", [&](const std::string& v) { o.warmup = std::stoi(v); }},
                      {"--steps", [&](const std::string& v) { o.steps = std::stoi(v); }},
                      {"--reps", [&](const std::string& v) { o.reps = std::stoi(v); }}});
  if (o.mode != "attention" && o.mode != "step") {
    std::fprintf(stderr, "cp_bench: --mode attention|step is required\n");
    std::exit(2);
  }
  return o;
}

// Every rank's value, in rank order (collective).
std::vector<double> gather_all(const maxctx::Communicator& world, double mine) {
  std::vector<double> all(static_cast<size_t>(world.size()));
  world.all_gather(std::span<const double>(&mine, 1), std::span<double>(all));
  return all;
}

json per_rank(const std::vector<double>& values) {
  const auto [lo, hi] = std::minmax_element(values.begin(), values.end());
  return {{"per_rank", values}, {"max_over_min", *hi / *lo}};
}

// Rows (Hkv·D or Hq·D floats) of a tensor for the given tokens, row t drawn from the
// counter-based RNG at index t: every rank builds the same values for the same token.
std::vector<float> token_rows(const std::vector<int64_t>& tokens, int64_t row, const char* name) {
  std::vector<float> x(tokens.size() * static_cast<size_t>(row));
  for (size_t i = 0; i < tokens.size(); ++i) {
    maxctx::rng::fill_normal(std::span<float>(x.data() + i * row, static_cast<size_t>(row)), 11,
                             maxctx::rng::stream_id(name), static_cast<uint64_t>(tokens[i] * row),
                             0.0f, 1.0f);
  }
  return x;
}

std::vector<int32_t> as_positions(const std::vector<int64_t>& tokens) {
  return std::vector<int32_t>(tokens.begin(), tokens.end());
}

json attention_case(const maxctx::Mesh& mesh, int64_t S, bool load_balance, int reps) {
  const maxctx::Communicator& context = mesh.axis(Axis::kContext);
  const maxctx::Communicator& world = mesh.world();
  const int64_t cp = context.size(), rank = context.rank();
  constexpr int64_t kHq = 8, kHkv = 2, kD = 32;
  const int64_t local = maxctx::context_shard_len(S, cp);

  // This rank's tokens, and the whole sequence in the gathered (rank-major) order.
  const std::vector<int64_t> mine = maxctx::context_shard_indices(S, cp, rank, load_balance);
  std::vector<int64_t> gathered;
  for (int64_t c = 0; c < cp; ++c) {
    const auto part = maxctx::context_shard_indices(S, cp, c, load_balance);
    gathered.insert(gathered.end(), part.begin(), part.end());
  }
  const auto q = token_rows(mine, kHq * kD, "q");
  const auto d_out = token_rows(mine, kHq * kD, "d_out");
  const auto k = token_rows(mine, kHkv * kD, "k");
  const auto v = token_rows(mine, kHkv * kD, "v");
  const auto full_k = token_rows(gathered, kHkv * kD, "k");
  const auto full_v = token_rows(gathered, kHkv * kD, "v");
  const auto q_pos = as_positions(mine);
  const auto k_pos = as_positions(gathered);
  const std::vector<int32_t> q_seg(static_cast<size_t>(local), 1), k_seg(static_cast<size_t>(S), 1);

  AttentionParams p;
  p.batch = 1;
  p.seq_q = local;
  p.seq_k = S;
  p.heads_q = kHq;
  p.heads_kv = kHkv;
  p.head_dim = kD;
  std::vector<float> out(q.size()), lse(static_cast<size_t>(kHq * local)), dq(q.size());
  std::vector<float> full_dk(full_k.size()), full_dv(full_v.size());

  // The kernels alone, every rank at once.
  double best_fwd = 1e30, best_bwd = 1e30;
  AttentionStats fwd_stats, bwd_stats;
  for (int r = 0; r < reps; ++r) {
    world.barrier();
    AttentionStats f, b;
    double start = bench::process_cpu_seconds();
    maxctx::kernels::cpu::attention_forward(out.data(), lse.data(), q.data(), full_k.data(),
                                            full_v.data(), q_pos.data(), q_seg.data(), k_pos.data(),
                                            k_seg.data(), p, &f);
    best_fwd = std::min(best_fwd, bench::process_cpu_seconds() - start);
    std::fill(dq.begin(), dq.end(), 0.0f);
    std::fill(full_dk.begin(), full_dk.end(), 0.0f);
    std::fill(full_dv.begin(), full_dv.end(), 0.0f);
    start = bench::process_cpu_seconds();
    maxctx::kernels::cpu::attention_backward(dq.data(), full_dk.data(), full_dv.data(),
                                             d_out.data(), out.data(), lse.data(), q.data(),
                                             full_k.data(), full_v.data(), q_pos.data(),
                                             q_seg.data(), k_pos.data(), k_seg.data(), p, &b);
    best_bwd = std::min(best_bwd, bench::process_cpu_seconds() - start);
    fwd_stats = f;
    bwd_stats = b;
  }
  const double tiles = static_cast<double>(fwd_stats.blocks_computed + bwd_stats.blocks_computed);

  // The plans themselves: forward + backward from a barrier, the slowest rank's wall time.
  json plans = json::object();
  const maxctx::parallel::TokenLayout layout{1, local, q_pos.data(), q_seg.data()};
  std::vector<float> dk(k.size()), dv(v.size());
  for (const char* strategy : {"all_gather", "ring"}) {
    std::unique_ptr<maxctx::parallel::AttentionPlan> plan;
    if (std::string(strategy) == "ring") {
      plan = std::make_unique<maxctx::parallel::RingContextAttention>(
          context, maxctx::kernels::backend(maxctx::Device::kCpu));
    } else {
      plan = std::make_unique<maxctx::parallel::AllGatherContextAttention>(
          context, maxctx::kernels::backend(maxctx::Device::kCpu));
    }
    double best_fwd_wall = 1e30, best_total_wall = 1e30;
    for (int r = 0; r < reps; ++r) {
      world.barrier();
      const double start = bench::wall_seconds();
      plan->forward(view(out), view(lse), view(q), view(k), view(v), layout, p);
      double fwd_wall = bench::wall_seconds() - start;
      plan->backward(view(dq), view(dk), view(dv), view(d_out), view(out), view(lse), view(q),
                     view(k), view(v), layout, p);
      double total_wall = bench::wall_seconds() - start;
      world.all_reduce(std::span<double>(&fwd_wall, 1), maxctx::ReduceOp::kMax);
      world.all_reduce(std::span<double>(&total_wall, 1), maxctx::ReduceOp::kMax);
      best_fwd_wall = std::min(best_fwd_wall, fwd_wall);
      best_total_wall = std::min(best_total_wall, total_wall);
    }
    const AttentionStats s = plan->stats();
    plans[strategy] = {
        {"forward_wall_seconds_slowest_rank", best_fwd_wall},
        {"forward_backward_wall_seconds_slowest_rank", best_total_wall},
        {"tiles_computed_per_forward_backward",
         per_rank(gather_all(world, static_cast<double>(s.blocks_computed) / reps))}};
  }
  return {{"tiles_computed", per_rank(gather_all(world, tiles))},
          {"tiles_skipped", gather_all(world, static_cast<double>(fwd_stats.blocks_skipped +
                                                                  bwd_stats.blocks_skipped))},
          {"kernel_cpu_seconds", per_rank(gather_all(world, best_fwd + best_bwd))},
          {"kernel_forward_cpu_seconds", per_rank(gather_all(world, best_fwd))},
          {"kernel_backward_cpu_seconds", per_rank(gather_all(world, best_bwd))},
          {"plans", plans}};
}

json attention_mode(const Options& o) {
  maxctx::MeshSpec spec;
  const int world_size = maxctx::Communicator::world().size();
  spec.ici[maxctx::axis_index(Axis::kContext)] = world_size;
  const maxctx::Mesh mesh(spec);
  json cases = json::object();
  for (const bool lb : {true, false}) {
    cases[lb ? "load_balance_on" : "load_balance_off"] = attention_case(mesh, o.seq, lb, o.reps);
  }
  return {{"shape",
           {{"batch", 1},
            {"seq", o.seq},
            {"heads_q", 8},
            {"heads_kv", 2},
            {"head_dim", 32},
            {"mask", "causal"},
            {"cp", world_size}}},
          {"reps", o.reps},
          {"tile_note",
           "tiles of the cpu kernel (query-row tile x key block) computed in forward "
           "+ backward on this rank's queries against all keys"},
          {"time_note",
           "kernel_*: best process CPU time of the kernels the all_gather plan runs "
           "on each rank, all ranks at once; plans: best wall time from a barrier, "
           "slowest rank"},
          {"cases", cases}};
}

json step_mode(const Options& o) {
  const int world_size = maxctx::Communicator::world().size();
  std::vector<std::string> overrides = {
      "model_name=" + o.model_name, "max_target_length=" + std::to_string(o.seq),
      // One sequence in the global batch whatever the number of ranks.
      "per_device_batch_size=" + std::to_string(1.0 / world_size),
      "steps=" + std::to_string(o.warmup + o.steps), "ici_fsdp_parallelism=1",
      "ici_context_parallelism=" + std::to_string(world_size),
      "context_parallel_strategy=" + o.strategy, "enable_checkpointing=false", "log_period=1000",
      "base_output_directory=" + o.run_dir, "run_name=cp_bench"};
  overrides.insert(overrides.end(), o.extra.begin(), o.extra.end());
  const maxctx::Config config = maxctx::load_config(o.config, overrides, world_size);
  maxctx::MeshSpec spec;
  spec.ici = config.derived.ici_parallelism;
  spec.dcn = config.derived.dcn_parallelism;
  const maxctx::Mesh mesh(spec);
  const double rss_before = bench::peak_rss_bytes();
  maxctx::train::Trainer trainer(config, mesh, maxctx::kernels::backend(maxctx::Device::kCpu));
  const double rss_constructed = bench::peak_rss_bytes();
  const bench::StepTimes times = bench::time_training_steps(trainer, mesh, o.warmup, o.steps);
  const double rss_peak = bench::peak_rss_bytes();
  const AttentionStats stats = trainer.attention_stats();
  const maxctx::Communicator& world = mesh.world();

  json out = {
      {"model_name", o.model_name},
      {"seq", o.seq},
      {"cp", world_size},
      {"strategy", world_size > 1 ? o.strategy : "none (cp = 1, LocalAttention)"},
      {"per_device_batch_size", config.per_device_batch_size},
      {"global_batch", config.derived.global_batch_size_to_train_on},
      {"load_balance", config.context_parallel_load_balance},
      {"extra_overrides", o.extra},
      {"warmup_steps", o.warmup},
      {"timed_steps", o.steps},
      {"tflops_per_step_per_device",
       maxctx::training_tflops_per_device(maxctx::flops_model(config), config.per_device_batch_size,
                                          config.max_target_length)
           .total},
      {"peak_rss_bytes", gather_all(world, rss_peak)},
      {"peak_rss_bytes_before_trainer", gather_all(world, rss_before)},
      {"peak_rss_bytes_after_construction", gather_all(world, rss_constructed)},
      {"attention_tiles_computed",
       per_rank(gather_all(world, static_cast<double>(stats.blocks_computed)))},
      {"losses", json::array()}};
  for (const auto& record : trainer.history()) out["losses"].push_back(record.loss);
  if (o.steps > 0) {
    out["step_wall_seconds"] = bench::time_summary(times.wall);
    out["step_cpu_seconds_per_rank_min"] =
        gather_all(world, *std::min_element(times.cpu.begin(), times.cpu.end()));
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  maxctx::MpiRuntime mpi(&argc, &argv);
  const Options o = parse(argc, argv);
  const double load_start = bench::load_average_1min();
  json out = o.mode == "attention" ? attention_mode(o) : step_mode(o);
  out["load_average_1min_at_start"] = load_start;
  out["load_average_1min_at_end"] = bench::load_average_1min();
  if (mpi.rank() == 0) {
    const std::string text = out.dump(2);
    if (o.out.empty()) {
      std::printf("%s\n", text.c_str());
    } else {
      std::ofstream(o.out) << text << "\n";
    }
  }
  return 0;
}

// The expert axis in training, measured in one run on 2 ranks (mpirun -np 2, one thread each):
// real Trainer steps of a small Mixtral (8 experts of width 512, 2 per token, E 256, 4 layers,
// V 4096) with expert = 1 (data = 2: every rank holds all 8 experts) and expert = 2 (4 experts
// per rank, rows exchanged with all_to_allv), both splitting the global batch of 2 sequences
// one per rank, both dispatch paths (sparse; dense without dropping). Reports tokens per second
// of the whole job (global tokens / the slowest rank's step time), the ratio expert=2 / expert=1,
// and each rank's parameter + gradient + optimizer bytes (expert = 2 holds half the experts).
// Writes one JSON object (rank 0).
//
//   mpirun -np 2 expert_bench [--seq S] [--steps N] [--out file.json] [--run-dir dir]
//                             [--config base.yml]
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <span>
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
  std::string run_dir = "expert_bench_runs";
  int64_t seq = 512;
  int steps = 3;
};

}  // namespace

int main(int argc, char** argv) {
  Options o;
  bench::parse_flags(argc, argv, "expert_bench",
                     {{"--config", [&](const std::string& v) { o.config = v; }},
                      {"--out", [&](const std::string& v) { o.out = v; }},
                      {"--run-dir", [&](const std::string& v) { o.run_dir = v; }},
                      {"--seq", [&](const std::string& v) { o.seq = std::stoll(v); }},
                      {"--steps", [&](const std::string& v) { o.steps = std::stoi(v); }}});
  maxctx::MpiRuntime mpi(&argc, &argv);
  const maxctx::Communicator world = maxctx::Communicator::world();
  if (world.size() != 2) {
    std::fprintf(stderr, "expert_bench: run it on 2 ranks (mpirun -np 2), not %d\n", world.size());
    return 2;
  }
  if (world.rank() == 0) std::filesystem::create_directories(o.run_dir);
  world.barrier();
  const std::vector<std::string> model = {"decoder_block=mixtral",
                                          "num_experts=8",
                                          "num_experts_per_tok=2",
                                          "base_mlp_dim=512",
                                          "base_emb_dim=256",
                                          "base_num_query_heads=4",
                                          "base_num_kv_heads=2",
                                          "head_dim=64",
                                          "base_num_decoder_layers=4",
                                          "vocab_size=4096",
                                          "load_balance_loss_weight=0.01"};
  const std::vector<std::pair<std::string, std::vector<std::string>>> meshes = {
      {"expert1_data2", {"ici_data_parallelism=2", "ici_expert_parallelism=1"}},
      {"expert2", {"ici_data_parallelism=1", "ici_expert_parallelism=2"}},
  };
  const std::vector<std::pair<std::string, std::vector<std::string>>> dispatches = {
      {"sparse", {"sparse_matmul=true"}},
      {"dense_no_drop", {"sparse_matmul=false", "capacity_factor=-1"}},
  };
  json results = json::object();
  for (const auto& [dispatch_name, dispatch] : dispatches) {
    json section = json::object();
    double expert1 = 0;
    for (const auto& [mesh_name, mesh_keys] : meshes) {
      std::vector<std::string> keys = model;
      keys.insert(keys.end(), dispatch.begin(), dispatch.end());
      keys.insert(keys.end(), mesh_keys.begin(), mesh_keys.end());
      keys.insert(keys.end(), {"max_target_length=" + std::to_string(o.seq),
                               "per_device_batch_size=1", "steps=" + std::to_string(1 + o.steps),
                               "ici_fsdp_parallelism=1", "enable_checkpointing=false",
                               "log_period=1000", "base_output_directory=" + o.run_dir,
                               "run_name=" + mesh_name + "_" + dispatch_name});
      const maxctx::Config config = maxctx::load_config(o.config, keys, world.size());
      const maxctx::Mesh mesh = bench::mesh_of(config);
      maxctx::train::Trainer trainer(config, mesh, maxctx::kernels::backend(maxctx::Device::kCpu));
      trainer.track_parameter_memory();
      const bench::StepTimes times = bench::time_training_steps(trainer, mesh, 1, o.steps);
      const double best = *std::min_element(times.wall.begin(), times.wall.end());
      const double tokens_per_s = static_cast<double>(2 * o.seq) / best;
      double bytes = static_cast<double>(trainer.parameter_memory().shard_bytes);
      world.all_reduce(std::span<double>(&bytes, 1), maxctx::ReduceOp::kMax);
      if (mesh_name == "expert1_data2") expert1 = tokens_per_s;
      section[mesh_name] = {{"step_wall_seconds", bench::time_summary(times.wall)},
                            {"tokens_per_second", tokens_per_s},
                            {"vs_expert1", tokens_per_s / expert1},
                            {"parameter_gradient_optimizer_bytes_max_rank", bytes},
                            {"final_loss", trainer.history().back().loss}};
      if (world.rank() == 0) {
        std::fprintf(stderr, "%s %s: %.0f tokens/s (%.2fx expert=1), %.1f MB per rank\n",
                     dispatch_name.c_str(), mesh_name.c_str(), tokens_per_s, tokens_per_s / expert1,
                     bytes / 1e6);
      }
    }
    results[dispatch_name] = section;
  }
  if (world.rank() != 0) return 0;
  json out = {{"benchmark", "expert_axis_training"},
              {"ranks", 2},
              {"seq", o.seq},
              {"global_batch", 2},
              {"threads_per_rank", 1},
              {"load_average_1min", bench::load_average_1min()},
              {"runs", results}};
  std::printf("%s\n", out.dump(2).c_str());
  if (!o.out.empty()) std::ofstream(o.out) << out.dump(2) << "\n";
  return 0;
}

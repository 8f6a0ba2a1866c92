// `maxctx plan` against real steps (issue #20): for small configs on 1, 2 and 4 ranks, the
// plan's per-axis communication (calls and bytes of every collective kind, as the communicator
// counts them) equals exactly what one training step sends, and its memory categories equal
// what the trainer allocated (the parameter, moment and gradient shards, the activations and
// workspace under the remat policy, the attention plan's staging buffers), byte for byte. A
// change to what the engine sends or allocates that the plan does not follow fails here.
// ctest runs this binary on 1, 2 and 4 ranks; a case runs where the world size matches.
#include <gtest/gtest.h>

#include "maxctx/mesh/mesh.h"
#include "maxctx/mesh/root_task.h"
#include "maxctx/mesh/traffic.h"
#include "maxctx/plan/step_plan.h"
#include "maxctx/train/trainer.h"
#include "support/mean_traffic.h"
#include "train_support.h"

namespace maxctx::train {
namespace {

struct DriftCase {
  std::string name;
  int ranks;
  std::vector<std::string> keys;
};

void PrintTo(const DriftCase& c, std::ostream* os) { *os << c.name; }

std::vector<DriftCase> drift_cases() {
  const std::string ag = "context_parallel_strategy=all_gather";
  const std::string ring = "context_parallel_strategy=ring";
  return {
      {"single_full", 1, {"remat_policy=full"}},
      // num_vocab_tiling: the logits buffer of one tile; on fsdp the head (and the tied
      // embedding it reads) gathered once per micro-batch, the tiles' backward run in the forward.
      {"single_vocab_tiles4", 1, {"num_vocab_tiling=4"}},
      {"fsdp2_vocab_tiles2_tied",
       2,
       {"ici_fsdp_parallelism=2", "num_vocab_tiling=2", "logits_via_embedding=true"}},
      {"single_bf16", 1, {"dtype=bfloat16", "weight_dtype=bfloat16", "remat_policy=minimal"}},
      {"mixtral_single",
       1,
       {"model_name=mixtral-tiny", "remat_policy=save_qkv_proj", "sparse_matmul=true"}},
      {"data2", 2, {"ici_data_parallelism=2"}},
      {"fsdp2_accumulate", 2, {"ici_fsdp_parallelism=2", "gradient_accumulation_steps=2"}},
      {"context2_all_gather_minimal", 2, {"ici_context_parallelism=2", ag, "remat_policy=minimal"}},
      {"context2_ring_full", 2, {"ici_context_parallelism=2", ring, "remat_policy=full"}},
      {"tensor2_save_qkv", 2, {"ici_tensor_parallelism=2", "remat_policy=save_qkv_proj"}},
      {"mixtral_context2",
       2,
       {"model_name=mixtral-tiny", "ici_context_parallelism=2", ag, "sparse_matmul=true"}},
      {"mixtral_context2_dropping",
       2,
       {"model_name=mixtral-tiny", "ici_context_parallelism=2", ring, "sparse_matmul=false",
        "capacity_factor=0.5"}},
      // The expert axis: dense dispatch's rows per expert are fixed (exact); sparse dispatch's
      // follow the routing (all-to-all bytes and expert buffers compared at their mean).
      {"mixtral_expert2_dropping",
       2,
       {"model_name=mixtral-tiny", "ici_expert_parallelism=2", "sparse_matmul=false",
        "capacity_factor=0.5"}},
      {"mixtral_expert2_sparse",
       2,
       {"model_name=mixtral-tiny", "ici_expert_parallelism=2", "sparse_matmul=true",
        "remat_policy=full"}},
      {"dense_expert2", 2, {"ici_expert_parallelism=2", "dtype=bfloat16"}},
      {"context4_all_gather", 4, {"ici_context_parallelism=4", ag}},
      {"mixtral_expert2_context2_ring",
       4,
       {"model_name=mixtral-tiny", "ici_expert_parallelism=2", "ici_context_parallelism=2", ring,
        "sparse_matmul=true"}},
      {"mixtral_expert2_fsdp2_dropping",
       4,
       {"model_name=mixtral-tiny", "ici_expert_parallelism=2", "ici_fsdp_parallelism=2",
        "sparse_matmul=false", "capacity_factor=0.5", "gradient_accumulation_steps=2"}},
      {"mixtral_context4_dropping_contiguous",
       4,
       {"model_name=mixtral-tiny", "ici_context_parallelism=4", ag,
        "context_parallel_load_balance=false", "sparse_matmul=false", "capacity_factor=0.5"}},
      {"context4_ring_bf16",
       4,
       {"ici_context_parallelism=4", ring, "dtype=bfloat16", "weight_dtype=bfloat16"}},
      {"fsdp2_context2_ring", 4, {"ici_fsdp_parallelism=2", "ici_context_parallelism=2", ring}},
      {"fsdp4_full", 4, {"ici_fsdp_parallelism=4", "remat_policy=full"}},
      {"tensor2_context2",
       4,
       {"ici_tensor_parallelism=2", "ici_context_parallelism=2", ag, "remat_policy=full"}},
  };
}

class PlanDrift : public ::testing::TestWithParam<DriftCase> {};

TEST_P(PlanDrift, PlanEqualsWhatOneStepAllocatesAndSends) {
  const DriftCase& c = GetParam();
  const Communicator world = Communicator::world();
  if (world.size() != c.ranks) GTEST_SKIP() << "needs " << c.ranks << " ranks";
  testing::SharedTempDir dir;
  const std::string tokens = testing::write_packed_token_file(dir.path());
  std::vector<std::string> keys = testing::with_overrides(
      testing::tiny_training_overrides(dir.path(), "plan_drift"),
      {"dataset_type=tokens", "dataset_path=" + tokens, "per_device_batch_size=2",
       "max_target_length=48", "steps=1", "ici_fsdp_parallelism=1"});
  keys = testing::with_overrides(keys, c.keys);
  const Config config = load_config(testing::kBaseConfig, keys, world.size());
  const plan::TrainingPlan plan = plan::plan_training(config);

  MeshSpec spec;
  spec.ici = config.derived.ici_parallelism;
  spec.dcn = config.derived.dcn_parallelism;
  const Mesh mesh(spec);
  Trainer trainer(config, mesh, kernels::backend(Device::kCpu));
  world.barrier();
  reset_counted_traffic();
  trainer.run(1);
  const Traffic counted = counted_traffic();
  world.barrier();
  const bool routed =
      plan.dims.expert > 1 && config.decoder_block == "mixtral" && config.sparse_matmul;
  const Traffic sent = routed ? maxctx::testing::with_mean_all_to_all(counted, world) : counted;

  // Rank 0's figures are the plan's; every rank's traffic is the same here (uneven fsdp shards
  // differ by one element at most, and these units divide evenly).
  // run() ends by flushing the metrics file (run_on_root): once per run, not per step.
  Traffic expected = plan.traffic;
  if (c.ranks > 1) expected.add("world", CollectiveKind::kBroadcast, kRootTaskBroadcastBytes);
  // Under the expert axis a unit's shards (over fsdp × context) cut its expert and non-expert
  // runs differently, so each shard's rank makes its own gradient sums: the plan's are shard 0's.
  const bool first_shard = mesh.coord(Axis::kFsdp) == 0 && mesh.coord(Axis::kContext) == 0;
  if (plan.dims.expert == 1 || first_shard) {
    EXPECT_EQ(sent, expected) << "counted:\n"
                              << format_traffic(sent) << "planned:\n"
                              << format_traffic(expected);
  }

  const AllocatedMemory held = trainer.allocated_memory();
  const plan::TrainingMemory& m = plan.memory;
  const int64_t accumulator = config.gradient_accumulation_steps > 1 ? m.gradients / 2 : 0;
  EXPECT_EQ(held.shards, m.parameters + m.optimizer + m.gradients - accumulator);
  EXPECT_EQ(held.attention_staging, m.attention_staging);
  if (!routed) {
    EXPECT_EQ(held.activations, m.activations);
    EXPECT_EQ(m.expert_routing_skew, 0);
    return;
  }
  // The expert buffers grow to the rows that arrive (and those sent): each rank holds at least
  // the plan's mean-routing count summed over the ranks (the rows received sum to the rows sent)
  // and never more than the plan's most-skewed routing allows.
  EXPECT_GT(m.expert_routing_skew, 0);
  EXPECT_LE(held.activations, m.activations + m.expert_routing_skew);
  int64_t total = held.activations;
  world.all_reduce(std::span<int64_t>(&total, 1), ReduceOp::kSum);
  EXPECT_GE(total, m.activations * world.size());
}

INSTANTIATE_TEST_SUITE_P(Meshes, PlanDrift, ::testing::ValuesIn(drift_cases()),
                         [](const auto& test) { return test.param.name; });

}  // namespace
}  // namespace maxctx::train

// Activation recomputation and fsdp memory on real meshes.
//
// Remat: 3 AdamW steps with remat_policy full / minimal / save_out_proj give the losses and the
// updated parameters of remat_policy=none on the same mesh bit for bit, on 1 rank and on
// {context=2} (all_gather and ring: the recomputed attention gathers or rings K/V again),
// {tensor=2} (the recomputed o_proj sums over tensor again) and {fsdp=2} (the backward gathers
// the weights again). ctest runs this binary on 1 and 2 ranks; a case runs where the world size
// matches.
// Fsdp memory: the shards are 1/fsdp of the model, and at most one unit's weights plus one
// unit's gradients were resident at once (the largest unit, plus the pages that neighbouring
// units share); with tied embeddings (the head gathers the embedding unit again) fsdp=2 equals
// the single-device run.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>

#include "maxctx/mesh/mesh.h"
#include "maxctx/model/llama_config.h"
#include "maxctx/model/weights.h"
#include "maxctx/train/trainer.h"
#include "train_support.h"

namespace maxctx::train {
namespace {

using testing::MeshCase;

std::vector<MeshCase> mesh_cases() {
  return {
      {"single", 1, {"ici_fsdp_parallelism=1"}},
      {"context2_all_gather",
       2,
       {"ici_fsdp_parallelism=1", "ici_context_parallelism=2",
        "context_parallel_strategy=all_gather"}},
      {"context2_ring",
       2,
       {"ici_fsdp_parallelism=1", "ici_context_parallelism=2", "context_parallel_strategy=ring"}},
      {"tensor2", 2, {"ici_fsdp_parallelism=1", "ici_tensor_parallelism=2"}},
      {"fsdp2", 2, {"ici_fsdp_parallelism=2"}},
  };
}

struct TrainedRun {
  std::vector<StepRecord> history;
  std::vector<float> params;
  ParameterMemory memory;
};

// On the world's mesh, or with `alone` on a one-rank mesh of this rank's own.
TrainedRun train(const testing::SharedTempDir& dir, const std::string& tokens, const MeshCase& c,
                 const std::vector<std::string>& extra, bool alone = false) {
  std::vector<std::string> overrides = testing::with_overrides(
      testing::tiny_training_overrides(dir.path(), "remat"),
      {"dataset_type=tokens", "dataset_path=" + tokens, "per_device_batch_size=1"});
  overrides.insert(overrides.end(), c.mesh.begin(), c.mesh.end());
  overrides = testing::with_overrides(overrides, extra);
  const int world = alone ? 1 : Communicator::world().size();
  const Config config = load_config(testing::kBaseConfig, overrides, world);
  MeshSpec spec;
  spec.ici = config.derived.ici_parallelism;
  spec.dcn = config.derived.dcn_parallelism;
  const Mesh mesh = alone ? Mesh(MeshSpec{}, Communicator::self()) : Mesh(spec);
  Trainer trainer(config, mesh, maxctx::kernels::backend(maxctx::Device::kCpu));
  trainer.track_parameter_memory();
  trainer.run();
  return {trainer.history(), trainer.gather_parameters(), trainer.parameter_memory()};
}

class RematOnMesh : public ::testing::TestWithParam<MeshCase> {};

TEST_P(RematOnMesh, EveryPolicyTrainsExactlyLikeNone) {
  const MeshCase& c = GetParam();
  if (Communicator::world().size() != c.ranks) GTEST_SKIP() << "needs " << c.ranks << " ranks";
  testing::SharedTempDir dir;
  const std::string tokens = testing::write_packed_token_file(dir.path());
  const TrainedRun none = train(dir, tokens, c, {"remat_policy=none"});
  for (const char* policy : {"full", "minimal", "save_out_proj"}) {
    const TrainedRun run = train(dir, tokens, c, {std::string("remat_policy=") + policy});
    ASSERT_EQ(run.history.size(), none.history.size());
    for (size_t i = 0; i < none.history.size(); ++i) {
      EXPECT_EQ(run.history[i].loss, none.history[i].loss) << policy << " step " << i;
      EXPECT_EQ(run.history[i].grad_norm, none.history[i].grad_norm) << policy << " step " << i;
    }
    ASSERT_EQ(run.params.size(), none.params.size());
    EXPECT_EQ(std::memcmp(run.params.data(), none.params.data(), run.params.size() * 4), 0)
        << policy << ": parameters differ from remat_policy=none";
  }
}

INSTANTIATE_TEST_SUITE_P(Meshes, RematOnMesh, ::testing::ValuesIn(mesh_cases()),
                         [](const auto& test_info) { return test_info.param.name; });

// fsdp = world size: shards of 1/fsdp, and no more than one unit's weights and gradients at once
// (with one rank, no full buffers beside the shard at all).
TEST(FsdpMemory, ShardsAreOneOverFsdpAndOnlyTheUnitsInUseAreResident) {
  const int world = Communicator::world().size();
  testing::SharedTempDir dir;
  const std::string tokens = testing::write_packed_token_file(dir.path());
  // Six layers, so that one unit is a small part of the model.
  const MeshCase c{"fsdp", world, {"ici_fsdp_parallelism=" + std::to_string(world)}};
  const TrainedRun run = train(dir, tokens, c,
                               {"override_model_config=true", "base_num_decoder_layers=6",
                                "per_device_batch_size=" + std::to_string(2 / world)});
  const Config config = load_config(testing::kBaseConfig,
                                    {"model_name=maxctx-tiny", "override_model_config=true",
                                     "base_num_decoder_layers=6", "ici_fsdp_parallelism=1"},
                                    1);
  const model::LlamaConfig model_config = model::llama_config_from(config);
  const std::vector<model::WeightSpec> specs = model::llama_weight_specs(model_config);
  const int64_t total = model::total_numel(specs);
  int64_t largest_unit = 0;
  const std::vector<model::FlatRange> units = model::weight_units(specs);
  for (const model::FlatRange& u : units) largest_unit = std::max(largest_unit, u.end - u.begin);
  // Master weights, both moments and the reduced gradients, f32: 16 bytes a parameter / fsdp.
  EXPECT_NEAR(static_cast<double>(run.memory.shard_bytes), 16.0 * total / world, 16.0 * 8);
  // One unit's weights and one unit's gradients (f32), and in both buffers the pages that two
  // units share (zeroed when a unit is freed, but kept for its neighbour).
  const int64_t page = ::sysconf(_SC_PAGESIZE);
  const auto boundary_pages = static_cast<int64_t>(units.size() + 1);
  if (world == 1) {
    // fsdp = 1: the full buffers are the shard itself, nothing gathered beside it.
    EXPECT_EQ(run.memory.peak_unit_bytes, 0);
    return;
  }
  EXPECT_GT(run.memory.peak_unit_bytes, 0);
  EXPECT_LE(run.memory.peak_unit_bytes, 2 * (4 * largest_unit + boundary_pages * page));
  EXPECT_LT(run.memory.peak_unit_bytes, 8 * total / 3) << "whole model's weights and gradients";
}

// Tied embeddings: the head gathers the embedding unit again (forward and backward) and its
// gradient lands in the embedding unit, freed only at the end of the backward. fsdp = 2 against
// one rank, 1e-5 as in train_equality_test.
TEST(FsdpMemory, TiedEmbeddingsMatchTheSingleDeviceRun) {
  if (Communicator::world().size() != 2) GTEST_SKIP() << "needs 2 ranks";
  testing::SharedTempDir dir;
  const std::string tokens = testing::write_packed_token_file(dir.path());
  const TrainedRun sharded = train(dir, tokens, {"fsdp2", 2, {"ici_fsdp_parallelism=2"}},
                                   {"logits_via_embedding=true", "run_name=tied_fsdp2"});
  const TrainedRun single =
      train(dir, tokens, {"single", 1, {"ici_fsdp_parallelism=1"}},
            {"logits_via_embedding=true", "per_device_batch_size=2", "run_name=tied_single"}, true);
  ASSERT_EQ(sharded.history.size(), single.history.size());
  for (size_t i = 0; i < single.history.size(); ++i) {
    const double expected = single.history[i].loss;
    EXPECT_LT(std::fabs(sharded.history[i].loss - expected) / expected, 1e-5) << "step " << i;
  }
  EXPECT_LT(testing::norm_relative_error(sharded.params, single.params), 1e-5);
}

}  // namespace
}  // namespace maxctx::train

// A checkpoint saved on one mesh restores on any other. On 4 ranks, a run saves at step 2 on
// its source mesh (fsdp=4; Mixtral on expert=2 x fsdp=2; weight_dtype=bfloat16 on fsdp=4); each
// restoring mesh (fsdp=1 x context=2 and tensor=2 on 2 ranks, 1 rank, data=2 x fsdp=2 on 4
// ranks) then starts from it with load_full_state_path on the first ranks of the world:
//  - the restored weights and both moments, gathered, equal the saved ones bit for bit (the
//    saved ones read whole from the checkpoint by one process);
//  - two more steps give the losses of the uninterrupted run on the restoring mesh within 1e-5
//    relative (different meshes reduce in different orders: not bit-identical);
//  - a save on the last restoring mesh stages on its rank 0 what `maxctx plan` says, and the
//    ranks' staged bytes add up to the state's (every element saved once).
// The global batch (4 rows) is the same on every mesh, so the data position carries over.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>

#include "maxctx/mesh/mesh.h"
#include "maxctx/model/weights.h"
#include "maxctx/plan/step_plan.h"
#include "maxctx/train/checkpoint.h"
#include "maxctx/train/initial_state.h"
#include "maxctx/train/trainer.h"
#include "train_loop/train_support.h"

namespace maxctx::train {
namespace {

struct Layout {
  std::string name;
  int ranks;
  std::vector<std::string> keys;  // mesh and per_device_batch_size (4 rows in all)
};

struct Source {
  std::string name;
  std::vector<std::string> model;  // model and precision keys
  Layout mesh;
};

std::vector<Source> sources() {
  return {
      {"dense_f32", {}, {"fsdp4", 4, {"ici_fsdp_parallelism=4", "per_device_batch_size=1"}}},
      {"dense_bf16_weights",
       {"weight_dtype=bfloat16"},
       {"fsdp4", 4, {"ici_fsdp_parallelism=4", "per_device_batch_size=1"}}},
      {"mixtral",
       {"model_name=mixtral-tiny", "load_balance_loss_weight=0.01"},
       {"expert2_fsdp2",
        4,
        {"ici_fsdp_parallelism=2", "ici_expert_parallelism=2", "per_device_batch_size=1"}}},
  };
}

std::vector<Layout> targets(const Source& source) {
  std::vector<Layout> layouts = {
      {"context2",
       2,
       {"ici_fsdp_parallelism=1", "ici_context_parallelism=2", "per_device_batch_size=2"}},
      {"tensor2",
       2,
       {"ici_fsdp_parallelism=1", "ici_tensor_parallelism=2", "per_device_batch_size=2"}},
      {"one_rank", 1, {"ici_fsdp_parallelism=1", "per_device_batch_size=4"}},
      {"data2_fsdp2",
       4,
       {"ici_data_parallelism=2", "ici_fsdp_parallelism=2", "per_device_batch_size=1"}},
  };
  if (source.name == "mixtral") {
    layouts.push_back(
        {"expert2",
         2,
         {"ici_fsdp_parallelism=1", "ici_expert_parallelism=2", "per_device_batch_size=2"}});
  }
  return layouts;
}

Mesh mesh_over(const Config& config, const Communicator& base) {
  MeshSpec spec;
  spec.ici = config.derived.ici_parallelism;
  spec.dcn = config.derived.dcn_parallelism;
  return Mesh(spec, base);
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

class Reshard : public ::testing::TestWithParam<Source> {};

TEST_P(Reshard, RestoresOnEveryMesh) {
  const Communicator world = Communicator::world();
  if (world.size() != 4) GTEST_SKIP() << "needs 4 ranks";
  const Source& source = GetParam();
  testing::SharedTempDir dir;
  const std::string tokens = testing::write_packed_token_file(dir.path());
  std::vector<std::string> common = testing::tiny_training_overrides(dir.path(), "run");
  common = testing::with_overrides(common, {"dataset_type=tokens", "dataset_path=" + tokens,
                                            "steps=4", "learning_rate_schedule_steps=4",
                                            "enable_checkpointing=true", "checkpoint_period=2"});
  common = testing::with_overrides(common, source.model);
  const auto config_for = [&](const Layout& layout, const std::string& run,
                              std::vector<std::string> extra) {
    std::vector<std::string> keys = testing::with_overrides(common, layout.keys);
    extra.push_back("run_name=" + run);
    return load_config(testing::kBaseConfig, testing::with_overrides(keys, extra), layout.ranks);
  };

  // The source run: 2 steps, saved at step 2.
  {
    const Config config = config_for(source.mesh, "source", {"steps=2"});
    const Mesh mesh = mesh_over(config, world);
    Trainer trainer(config, mesh, maxctx::kernels::backend(maxctx::Device::kCpu));
    trainer.run();
  }
  const std::filesystem::path saved = dir.path() / "source" / "checkpoints" / "2";

  for (const Layout& target : targets(source)) {
    SCOPED_TRACE(target.name);
    const Communicator group = world.split(world.rank() < target.ranks ? 0 : 1, world.rank());
    if (world.rank() < target.ranks) {
      // The whole saved state, read by this process alone: the reference for the gathered one.
      const Config restoring =
          config_for(target, "restored_" + target.name,
                     {"load_full_state_path=" + saved.string(), "enable_checkpointing=false"});
      const model::LlamaConfig model_config = training_model_config(restoring);
      const std::vector<model::WeightSpec> specs = model::llama_weight_specs(model_config);
      const auto n = static_cast<size_t>(model::total_numel(specs));
      std::vector<float> params(n), adam_m(n), adam_v(n);
      {
        const auto& cpu = maxctx::kernels::backend(maxctx::Device::kCpu);
        const DType dtype = model_config.weight_dtype;
        const Tensor p = cpu.empty({static_cast<int64_t>(n)}, dtype);
        const Tensor m = cpu.empty({static_cast<int64_t>(n)}, dtype);
        const Tensor v = cpu.empty({static_cast<int64_t>(n)}, dtype);
        read_checkpoint(dir.path() / "source", 2, specs, p.view(), m.view(), v.view());
        const auto n64 = static_cast<int64_t>(n);
        cpu.copy(TensorView::of(params.data(), n64), p.view());
        cpu.copy(TensorView::of(adam_m.data(), n64), m.view());
        cpu.copy(TensorView::of(adam_v.data(), n64), v.view());
      }

      const Mesh mesh = mesh_over(restoring, group);
      Trainer restored(restoring, mesh, maxctx::kernels::backend(maxctx::Device::kCpu));
      EXPECT_EQ(restored.step(), 2);
      const Trainer::GatheredState state = restored.gather_state();
      EXPECT_TRUE(same_bits(state.params, params));
      EXPECT_TRUE(same_bits(state.adam_m, adam_m));
      EXPECT_TRUE(same_bits(state.adam_v, adam_v));
      restored.run();

      const Config fresh =
          config_for(target, "uninterrupted_" + target.name, {"enable_checkpointing=false"});
      const Mesh fresh_mesh = mesh_over(fresh, group);
      Trainer uninterrupted(fresh, fresh_mesh, maxctx::kernels::backend(maxctx::Device::kCpu));
      uninterrupted.run();
      ASSERT_EQ(restored.history().size(), 2u);
      ASSERT_EQ(uninterrupted.history().size(), 4u);
      for (size_t i = 0; i < 2; ++i) {
        const double expected = uninterrupted.history()[i + 2].loss;
        const double loss = restored.history()[i].loss;
        EXPECT_EQ(restored.history()[i].step, static_cast<int64_t>(i + 2));
        EXPECT_LT(std::fabs(loss - expected) / expected, 1e-5)
            << "step " << i + 2 << ": " << loss << " vs " << expected;
        EXPECT_EQ(restored.history()[i].total_weights,
                  uninterrupted.history()[i + 2].total_weights);
      }
      if (group.rank() == 0) {
        std::printf(
            "%s -> %s: state bit-identical, steps 2-3 loss %.9g %.9g (uninterrupted %.9g "
            "%.9g)\n",
            source.name.c_str(), target.name.c_str(), restored.history()[0].loss,
            restored.history()[1].loss, uninterrupted.history()[2].loss,
            uninterrupted.history()[3].loss);
      }
    }
    world.barrier();
  }

  // A save on the restoring side stages what the plan says (rank 0 holds the most).
  {
    const Layout target = targets(source).back();
    const Config config = config_for(target, "staged", {"steps=2"});
    const Communicator group = world.split(world.rank() < target.ranks ? 0 : 1, world.rank());
    if (world.rank() < target.ranks) {
      const Mesh mesh = mesh_over(config, group);
      Trainer trainer(config, mesh, maxctx::kernels::backend(maxctx::Device::kCpu));
      trainer.run();
      if (group.rank() == 0) {
        EXPECT_EQ(trainer.last_checkpoint_staged_bytes(),
                  plan::plan_training(config).memory.checkpoint_state);
      }
      // Every element saved once: the ranks' staged bytes add up to the state's.
      int64_t total = trainer.last_checkpoint_staged_bytes();
      group.all_reduce(std::span<int64_t>(&total, 1), ReduceOp::kSum);
      const model::LlamaConfig m = training_model_config(config);
      EXPECT_EQ(total, 3 * model::total_numel(model::llama_weight_specs(m)) *
                           static_cast<int64_t>(dtype_size(m.weight_dtype)));
    }
    world.barrier();
  }
}

INSTANTIATE_TEST_SUITE_P(Sources, Reshard, ::testing::ValuesIn(sources()),
                         [](const ::testing::TestParamInfo<Source>& p) { return p.param.name; });

}  // namespace
}  // namespace maxctx::train

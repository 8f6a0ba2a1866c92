// The training loop on one rank: a resumed run reproduces the uninterrupted run exactly, the
// loss falls, and the error paths (missing data, truncated checkpoint, bad steps) are clear.
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>

#include "maxctx/core/check.h"
#include "maxctx/kernels/cpu/attention_tiles.h"
#include "maxctx/kernels/cpu/gemm_bf16.h"
#include "maxctx/mesh/mesh.h"
#include "maxctx/train/trainer.h"
#include "train_support.h"

namespace maxctx::train {
namespace {

namespace fs = std::filesystem;

Config tiny_config(const fs::path& dir, const std::string& run,
                   std::vector<std::string> extra = {}) {
  std::vector<std::string> overrides = testing::tiny_training_overrides(dir, run);
  overrides.insert(overrides.end(),
                   {"ici_fsdp_parallelism=1", "per_device_batch_size=2", "dataset_type=synthetic"});
  return load_config(testing::kBaseConfig, testing::with_overrides(overrides, extra), 1);
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

// fp32, and bf16 master weights and moments (checkpoints then hold BF16 tensors).
class TrainLoopResume : public ::testing::TestWithParam<std::vector<std::string>> {};

TEST_P(TrainLoopResume, ReproducesTheUninterruptedRunExactly) {
  testing::SharedTempDir dir;
  std::vector<std::string> keys = {"steps=4", "learning_rate_schedule_steps=4",
                                   "enable_checkpointing=true", "checkpoint_period=2"};
  keys.insert(keys.end(), GetParam().begin(), GetParam().end());
  const Mesh mesh(MeshSpec{});
  Trainer straight(tiny_config(dir.path(), "straight", keys), mesh,
                   maxctx::kernels::backend(maxctx::Device::kCpu));
  straight.run();
  ASSERT_EQ(straight.history().size(), 4u);

  {
    Trainer first_half(tiny_config(dir.path(), "resumed", keys), mesh,
                       maxctx::kernels::backend(maxctx::Device::kCpu));
    first_half.run(2);
    ASSERT_EQ(first_half.step(), 2);
  }
  ASSERT_TRUE(fs::exists(dir.path() / "resumed" / "checkpoints" / "2" / "index.json"));
  Trainer second_half(tiny_config(dir.path(), "resumed", keys), mesh,
                      maxctx::kernels::backend(maxctx::Device::kCpu));
  EXPECT_EQ(second_half.step(), 2);
  second_half.run();
  ASSERT_EQ(second_half.history().size(), 2u);
  for (int i = 0; i < 2; ++i) {
    EXPECT_EQ(second_half.history()[i].step, straight.history()[2 + i].step);
    EXPECT_EQ(second_half.history()[i].loss, straight.history()[2 + i].loss) << "step " << 2 + i;
  }
  EXPECT_EQ(second_half.gather_parameters(), straight.gather_parameters());
  // The loss falls on this data (random tokens: it learns the unigram distribution at least).
  EXPECT_LT(straight.history()[3].loss, straight.history()[0].loss);
  EXPECT_TRUE(fs::exists(dir.path() / "straight" / "metrics.jsonl"));
}

INSTANTIATE_TEST_SUITE_P(
    Precisions, TrainLoopResume,
    ::testing::Values(std::vector<std::string>{},
                      std::vector<std::string>{"dtype=bfloat16", "weight_dtype=bfloat16"}),
    [](const auto& param_info) { return param_info.param.empty() ? "f32" : "bf16"; });

TEST(TrainLoop, CheckpointOfAnotherWeightDtypeIsAClearError) {
  testing::SharedTempDir dir;
  const std::vector<std::string> keys = {"steps=2", "enable_checkpointing=true",
                                         "checkpoint_period=2", "weight_dtype=bfloat16"};
  const Mesh mesh(MeshSpec{});
  Trainer(tiny_config(dir.path(), "run", keys), mesh,
          maxctx::kernels::backend(maxctx::Device::kCpu))
      .run();
  const std::string error = error_of([&] {
    Trainer(tiny_config(dir.path(), "run", {"steps=4", "enable_checkpointing=true"}), mesh,
            maxctx::kernels::backend(maxctx::Device::kCpu));
  });
  EXPECT_NE(error.find("is BF16, this run keeps its weights in F32 (weight_dtype)"),
            std::string::npos)
      << error;
}

TEST(TrainLoop, TruncatedCheckpointIsAClearError) {
  testing::SharedTempDir dir;
  const Mesh mesh(MeshSpec{});
  const std::vector<std::string> keys = {"steps=2", "enable_checkpointing=true",
                                         "checkpoint_period=2"};
  {
    Trainer trainer(tiny_config(dir.path(), "run", keys), mesh,
                    maxctx::kernels::backend(maxctx::Device::kCpu));
    trainer.run();
  }
  const fs::path model_file = dir.path() / "run" / "checkpoints" / "2" / "shard-00000.safetensors";
  ASSERT_TRUE(fs::exists(model_file));
  fs::resize_file(model_file, fs::file_size(model_file) / 2);
  const std::string error = error_of([&] {
    Trainer(tiny_config(dir.path(), "run", keys), mesh,
            maxctx::kernels::backend(maxctx::Device::kCpu));
  });
  EXPECT_NE(error.find("shard-00000.safetensors"), std::string::npos) << error;
}

TEST(TrainLoop, MissingDatasetFileIsAClearError) {
  testing::SharedTempDir dir;
  const Mesh mesh(MeshSpec{});
  const std::string error = error_of([&] {
    Trainer(tiny_config(dir.path(), "run",
                        {"dataset_type=tokens", "dataset_path=/nonexistent/tokens.bin"}),
            mesh, maxctx::kernels::backend(maxctx::Device::kCpu));
  });
  EXPECT_NE(error.find("/nonexistent/tokens.bin"), std::string::npos) << error;
}

TEST(TrainLoop, NegativeStepsAreRejected) {
  testing::SharedTempDir dir;
  const std::string error = error_of([&] { tiny_config(dir.path(), "run", {"steps=-3"}); });
  EXPECT_NE(error.find("steps = -3 is negative"), std::string::npos) << error;
}

}  // namespace
}  // namespace maxctx::train

namespace maxctx::train {
namespace {

// The recall task is learnable: a tiny model on 64-token rows finds the one key-value pair
// hidden in the filler and answers the query at the end, > 90% exact match over the last 20
// steps (fresh rows every step, so this is held-out accuracy), within a few seconds.
TEST(TrainLoop, RecallIsLearnable) {
  testing::SharedTempDir dir;
  const Mesh mesh(MeshSpec{});
  const Config config = tiny_config(
      dir.path(), "recall",
      {"dataset_type=recall", "recall_num_pairs=1", "max_target_length=64", "model_name=default",
       "base_emb_dim=64", "base_num_query_heads=4", "base_num_kv_heads=2", "base_mlp_dim=192",
       "base_num_decoder_layers=2", "head_dim=16", "vocab_size=64", "per_device_batch_size=16",
       "steps=400", "learning_rate=3e-3", "learning_rate_schedule_steps=400",
       "warmup_steps_fraction=0.05"});
  Trainer trainer(config, mesh, maxctx::kernels::backend(maxctx::Device::kCpu));
  trainer.run();
  const auto& history = trainer.history();
  ASSERT_EQ(history.size(), 400u);
  double first = 0.0, last = 0.0;
  for (int i = 0; i < 20; ++i) {
    first += history[i].accuracy / 20;
    last += history[history.size() - 20 + i].accuracy / 20;
  }
  EXPECT_LT(first, 0.2);
  EXPECT_GT(last, 0.9) << "recall accuracy over the last 20 steps";
}

}  // namespace
}  // namespace maxctx::train

namespace maxctx::train {
namespace {

// The precision contract's promise that bf16 bits do not depend on the CPU, on a whole run:
// three bf16 training steps with the bf16 GEMM and attention tiles on AMX (when this CPU has
// it) and on the portable path that replays AMX's rounding sequence give the same losses and
// parameters, bit for bit. On a CPU without AMX both runs take the portable path.
TEST(TrainLoopBf16, PortablePathReproducesTheRunBitForBit) {
  testing::SharedTempDir dir;
  const std::vector<std::string> keys = {"steps=3", "dtype=bfloat16", "max_target_length=64"};
  const Mesh mesh(MeshSpec{});
  const auto run = [&](const std::string& name) {
    Trainer trainer(tiny_config(dir.path(), name, keys), mesh,
                    maxctx::kernels::backend(maxctx::Device::kCpu));
    trainer.run();
    return std::make_pair(trainer.history(), trainer.gather_parameters());
  };
  const auto fast = run("fast");
  kernels::cpu::set_gemm_bf16_path(kernels::cpu::Bf16Path::kPortable);
  kernels::cpu::attention_bf16_force_portable(true);
  const auto portable = run("portable");
  kernels::cpu::set_gemm_bf16_path(kernels::cpu::Bf16Path::kBest);
  kernels::cpu::attention_bf16_force_portable(false);
  std::printf("bf16 products on %s against the portable path\n",
              kernels::cpu::gemm_bf16_kernel_name());
  ASSERT_EQ(fast.first.size(), 3u);
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(fast.first[i].loss, portable.first[i].loss) << "step " << i;
  }
  EXPECT_EQ(fast.second, portable.second);
}

}  // namespace
}  // namespace maxctx::train

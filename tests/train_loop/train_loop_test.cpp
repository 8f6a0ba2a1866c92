// The training loop on one rank: a resumed run reproduces the uninterrupted run exactly, the
// loss falls, and the error paths (missing data, truncated checkpoint, bad steps) are clear.
#include <gtest/gtest.h>

#include <fstream>

#include "maxctx/core/check.h"
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

TEST(TrainLoop, ResumeReproducesTheUninterruptedRunExactly) {
  testing::SharedTempDir dir;
  const std::vector<std::string> keys = {"steps=4", "learning_rate_schedule_steps=4",
                                         "enable_checkpointing=true", "checkpoint_period=2"};
  const Mesh mesh(MeshSpec{});
  Trainer straight(tiny_config(dir.path(), "straight", keys), mesh);
  straight.run();
  ASSERT_EQ(straight.history().size(), 4u);

  {
    Trainer first_half(tiny_config(dir.path(), "resumed", keys), mesh);
    first_half.run(2);
    ASSERT_EQ(first_half.step(), 2);
  }
  ASSERT_TRUE(fs::exists(dir.path() / "resumed" / "checkpoints" / "2" / "model.safetensors"));
  Trainer second_half(tiny_config(dir.path(), "resumed", keys), mesh);
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

TEST(TrainLoop, TruncatedCheckpointIsAClearError) {
  testing::SharedTempDir dir;
  const Mesh mesh(MeshSpec{});
  const std::vector<std::string> keys = {"steps=2", "enable_checkpointing=true",
                                         "checkpoint_period=2"};
  {
    Trainer trainer(tiny_config(dir.path(), "run", keys), mesh);
    trainer.run();
  }
  const fs::path model_file = dir.path() / "run" / "checkpoints" / "2" / "model.safetensors";
  ASSERT_TRUE(fs::exists(model_file));
  fs::resize_file(model_file, fs::file_size(model_file) / 2);
  const std::string error = error_of([&] { Trainer(tiny_config(dir.path(), "run", keys), mesh); });
  EXPECT_NE(error.find("model.safetensors"), std::string::npos) << error;
}

TEST(TrainLoop, MissingDatasetFileIsAClearError) {
  testing::SharedTempDir dir;
  const Mesh mesh(MeshSpec{});
  const std::string error = error_of([&] {
    Trainer(tiny_config(dir.path(), "run",
                        {"dataset_type=tokens", "dataset_path=/nonexistent/tokens.bin"}),
            mesh);
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

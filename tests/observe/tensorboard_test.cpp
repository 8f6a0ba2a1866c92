// TensorBoard event files (io/tensorboard.h): the checksum against published CRC-32C values,
// records read back through the protobuf schema, damage detected, and a training run's event
// file holding MaxText's scalars with the values of its metrics.jsonl.
#include "maxctx/io/tensorboard.h"

#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <string>

#include "maxctx/config/config.h"
#include "maxctx/core/check.h"
#include "maxctx/mesh/mesh.h"
#include "maxctx/train/trainer.h"

namespace maxctx {
namespace {

namespace fs = std::filesystem;

fs::path fresh_dir(const std::string& name) {
  const fs::path dir = fs::temp_directory_path() /
                       ("maxctx_tb_" + name + "_" +
                        std::to_string(::testing::UnitTest::GetInstance()->random_seed()));
  fs::remove_all(dir);
  return dir;
}

TEST(TensorBoard, Crc32cMatchesPublishedValues) {
  // RFC 3720 B.4 and the usual check value.
  EXPECT_EQ(crc32c("123456789", 9), 0xe3069283u);
  const std::string zeros(32, '\0'), ones(32, '\xff');
  EXPECT_EQ(crc32c(zeros.data(), zeros.size()), 0x8a9136aau);
  EXPECT_EQ(crc32c(ones.data(), ones.size()), 0x62a8ab43u);
  const uint32_t crc = crc32c("123456789", 9);
  EXPECT_EQ(masked_crc32c("123456789", 9), ((crc >> 15) | (crc << 17)) + 0xa282ead8u);
}

TEST(TensorBoard, ScalarsReadBackThroughTheSchema) {
  const fs::path dir = fresh_dir("roundtrip");
  fs::path file;
  {
    TensorBoardWriter writer(dir);
    writer.add_scalars(0, {{"learning/loss", 2.5}, {"perf/step_time_seconds", 0.125}});
    writer.add_scalars(7, {{"learning/loss", 1.75}});
    file = writer.file();
  }
  EXPECT_EQ(event_files(dir), std::vector<fs::path>{file});
  EXPECT_TRUE(file.filename().string().starts_with("events.out.tfevents."));
  const std::vector<ScalarEvent> scalars = read_scalar_events(file);
  ASSERT_EQ(scalars.size(), 3u);
  EXPECT_EQ(scalars[0].tag, "learning/loss");
  EXPECT_EQ(scalars[0].step, 0);
  EXPECT_EQ(scalars[0].value, 2.5f);
  EXPECT_EQ(scalars[1].tag, "perf/step_time_seconds");
  EXPECT_EQ(scalars[1].value, 0.125f);
  EXPECT_EQ(scalars[2].step, 7);
  EXPECT_EQ(scalars[2].value, 1.75f);
  EXPECT_GT(scalars[2].wall_time, 1.6e9);

  // One flipped byte in the last record's payload: its data checksum no longer matches.
  const auto size = fs::file_size(file);
  {
    std::fstream f(file, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(static_cast<std::streamoff>(size - 6));
    f.put('\x5a');
  }
  try {
    read_scalar_events(file);
    ADD_FAILURE() << "a damaged record was read";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("bad data checksum"), std::string::npos) << e.what();
  }
  fs::remove_all(dir);
}

TEST(TensorBoard, TrainingRunWritesMaxTextScalars) {
  const fs::path dir = fresh_dir("train");
  const std::string base = std::string(MAXCTX_SOURCE_DIR) + "/configs/base.yml";
  const Config config = load_config(
      base,
      {"model_name=maxctx-tiny", "max_target_length=32", "steps=3", "enable_checkpointing=false",
       "ici_fsdp_parallelism=1", "per_device_batch_size=1", "dataset_type=synthetic",
       "log_period=1", "base_output_directory=" + dir.string(), "run_name=tb"},
      1);
  const Mesh mesh(MeshSpec{});
  {
    train::Trainer trainer(config, mesh, kernels::backend(Device::kCpu));
    trainer.run();
  }
  const std::vector<fs::path> files = event_files(dir / "tb" / "tensorboard");
  ASSERT_EQ(files.size(), 1u);
  std::map<std::pair<std::string, int64_t>, float> scalars;
  for (const ScalarEvent& e : read_scalar_events(files[0])) scalars[{e.tag, e.step}] = e.value;

  std::ifstream jsonl(dir / "tb" / "metrics.jsonl");
  std::string line;
  int lines = 0;
  for (; std::getline(jsonl, line); ++lines) {
    const nlohmann::json row = nlohmann::json::parse(line);
    const int64_t step = row["step"];
    for (const char* name :
         {"learning/loss", "learning/grad_norm", "perf/step_time_seconds", "perf/per_device_tflops",
          "perf/per_device_tokens_per_sec", "learning/current_learning_rate"}) {
      const auto it = scalars.find({name, step});
      ASSERT_NE(it, scalars.end()) << name << " at step " << step;
      EXPECT_EQ(it->second, static_cast<float>(row[name].get<double>())) << name;
    }
  }
  EXPECT_EQ(lines, 3);
  fs::remove_all(dir);
}

}  // namespace
}  // namespace maxctx

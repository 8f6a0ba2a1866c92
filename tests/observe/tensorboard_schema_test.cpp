// io/tensorboard.cpp encodes Event records by hand; this parses them with protobuf's generated
// code for the schema (io/tensorboard_event.proto, TensorFlow's field numbers), an independent
// decoder. Links no sentencepiece (see CMakeLists.txt on why the two cannot share a binary).
#include <gtest/gtest.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "maxctx/io/tensorboard.h"
#include "maxctx/io/tensorboard_event.pb.h"

namespace maxctx {
namespace {

namespace fs = std::filesystem;

uint64_t little_endian(const std::string& bytes, size_t at, int count) {
  uint64_t value = 0;
  for (int i = 0; i < count; ++i) {
    value |= static_cast<uint64_t>(static_cast<unsigned char>(bytes[at + i])) << (8 * i);
  }
  return value;
}

TEST(TensorBoardSchema, ProtobufParsesEveryRecord) {
  const fs::path dir = fs::temp_directory_path() / "maxctx_tb_schema_test";
  fs::remove_all(dir);
  fs::path file;
  {
    TensorBoardWriter writer(dir);
    writer.add_scalars(0, {{"learning/loss", 3.25}, {"perf/per_device_tflops", 1e-4}});
    writer.add_scalars(300, {{"learning/current_learning_rate", -0.5}});
    file = writer.file();
  }
  std::ifstream in(file, std::ios::binary);
  const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::vector<tensorboard::Event> events;
  for (size_t at = 0; at < bytes.size();) {
    ASSERT_LE(at + 12, bytes.size());
    const uint64_t length = little_endian(bytes, at, 8);
    EXPECT_EQ(little_endian(bytes, at + 8, 4), masked_crc32c(bytes.data() + at, 8));
    ASSERT_LE(at + 12 + length + 4, bytes.size());
    const std::string data = bytes.substr(at + 12, length);
    EXPECT_EQ(little_endian(bytes, at + 12 + length, 4), masked_crc32c(data.data(), data.size()));
    tensorboard::Event event;
    ASSERT_TRUE(event.ParseFromString(data));
    events.push_back(event);
    at += 12 + length + 4;
  }
  ASSERT_EQ(events.size(), 4u);
  EXPECT_EQ(events[0].file_version(), "brain.Event:2");
  EXPECT_GT(events[0].wall_time(), 1.6e9);
  ASSERT_TRUE(events[1].has_summary());
  ASSERT_EQ(events[1].summary().value_size(), 1);
  EXPECT_EQ(events[1].step(), 0);
  EXPECT_EQ(events[1].summary().value(0).tag(), "learning/loss");
  EXPECT_EQ(events[1].summary().value(0).simple_value(), 3.25f);
  EXPECT_EQ(events[2].summary().value(0).tag(), "perf/per_device_tflops");
  EXPECT_EQ(events[2].summary().value(0).simple_value(), 1e-4f);
  EXPECT_EQ(events[3].step(), 300);
  EXPECT_EQ(events[3].summary().value(0).tag(), "learning/current_learning_rate");
  EXPECT_EQ(events[3].summary().value(0).simple_value(), -0.5f);
  EXPECT_GE(events[3].wall_time(), events[2].wall_time());
  fs::remove_all(dir);
}

}  // namespace
}  // namespace maxctx

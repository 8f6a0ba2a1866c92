// TensorBoard event files: scalars written as TensorFlow Event records (protobuf, schema in
// tensorboard_event.proto) in TFRecord framing, the format TensorBoard's reader loads from a
// run's directory; and a reader of the same records (tests, `maxctx plot`).
//
// TFRecord framing, per record: uint64 length, uint32 masked CRC32C of those 8 bytes, the data,
// uint32 masked CRC32C of the data; little-endian. A file is named
// events.out.tfevents.<unix seconds>.<host> and begins with a file_version event.
// What it is not: a summary API with histograms or images; only scalars (simple_value, float:
// TensorBoard's own precision for them).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace maxctx {

// CRC-32C (Castagnoli) and TFRecord's mask of it: rotate right by 15, add 0xa282ead8.
uint32_t crc32c(const void* data, size_t size);
uint32_t masked_crc32c(const void* data, size_t size);

class TensorBoardWriter {
 public:
  // Creates `directory` and a new event file in it (errors name the path).
  explicit TensorBoardWriter(const std::filesystem::path& directory);
  ~TensorBoardWriter();
  TensorBoardWriter(const TensorBoardWriter&) = delete;
  TensorBoardWriter& operator=(const TensorBoardWriter&) = delete;

  // One event per scalar, as MaxText's writer.add_scalar(tag, value, step) does.
  void add_scalars(int64_t step, const std::vector<std::pair<std::string, double>>& scalars);
  void flush();
  const std::filesystem::path& file() const { return path_; }

 private:
  void write_record(const std::string& data);

  std::filesystem::path path_;
  std::unique_ptr<FILE, int (*)(FILE*)> file_;
};

struct ScalarEvent {
  int64_t step = 0;
  double wall_time = 0.0;
  std::string tag;
  float value = 0.0f;
};

// Every scalar of an event file, in file order; a bad length, CRC or record is an error naming
// the file and the record.
std::vector<ScalarEvent> read_scalar_events(const std::filesystem::path& file);

// The event files of a directory (events.out.tfevents.*), sorted by name.
std::vector<std::filesystem::path> event_files(const std::filesystem::path& directory);

}  // namespace maxctx

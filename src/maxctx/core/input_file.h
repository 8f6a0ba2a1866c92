// Every file maxctx reads that a user named (a config, a Hugging Face checkpoint's JSON files, a
// tokenizer, a data file, a checkpoint's state, golden logits) is opened here (issue #34 N5):
//  - opened non-blocking, so that a FIFO of the name is refused at once instead of waiting for a
//    writer forever, then checked with fstat on the open descriptor: anything but a regular file
//    (a FIFO, a device such as /dev/zero behind a symlink, a directory, a socket) is one
//    maxctx::Error line naming the file and what it is;
//  - bounded: a file larger than `max_bytes` (what its format can sensibly hold) is refused before
//    a byte is read, so a read never runs away;
//  - a symlink loop or a missing file is the open's own reason, in one line.
// Reading never goes past the size fstat reported: a file that grows while read is cut there.
#pragma once

#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <string>
#include <string_view>

namespace maxctx {

inline constexpr int64_t kKiB = int64_t{1} << 10;
inline constexpr int64_t kMiB = int64_t{1} << 20;
inline constexpr int64_t kGiB = int64_t{1} << 30;
// A streamed file (data, golden logits): no bound beyond what the file system holds.
inline constexpr int64_t kAnySize = INT64_MAX;

class InputFile {
 public:
  // `what` names the file's role in errors ("tokenizer file", "state.json").
  InputFile(const std::filesystem::path& path, std::string_view what, int64_t max_bytes);
  ~InputFile();
  InputFile(const InputFile&) = delete;
  InputFile& operator=(const InputFile&) = delete;

  int fd() const { return fd_; }
  int64_t size() const { return size_; }
  // The whole file (its fstat size), or a maxctx::Error naming it when a read fails.
  std::string read_all();
  // Up to `bytes` bytes from `offset` into `out` (fewer only where the file ends); a failed read
  // is a maxctx::Error naming the file.
  int64_t read_at(void* out, int64_t bytes, int64_t offset);
  // The next line without its '\n' into `line`; false at the end. Streams the file through a
  // buffer, so any size can be read line by line.
  bool read_line(std::string& line);

 private:
  std::filesystem::path path_;
  std::string what_;
  int fd_ = -1;
  int64_t size_ = 0;
  FILE* stream_ = nullptr;       // for read_line, opened on first use
  char* line_buffer_ = nullptr;  // getline(3)'s, reused from line to line
  size_t line_capacity_ = 0;
};

// InputFile(path, what, max_bytes).read_all().
std::string read_input_file(const std::filesystem::path& path, std::string_view what,
                            int64_t max_bytes);

}  // namespace maxctx

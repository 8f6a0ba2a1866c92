// core/input_file.h (issue #34 N5): what the one opening of user-named files refuses, and that
// what it accepts reads back whole, line by line included.
#include "maxctx/core/input_file.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "io/temp_dir.h"
#include "maxctx/core/check.h"

namespace maxctx {
namespace {

namespace fs = std::filesystem;

std::string error_of(const fs::path& path, int64_t max_bytes = kAnySize) {
  try {
    InputFile file(path, "test file", max_bytes);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

class InputFileTest : public ::testing::Test {
 protected:
  io::TempDir temp_;
  const fs::path& dir_ = temp_.path();
};

TEST_F(InputFileTest, RefusesWhatIsNotARegularFile) {
  const fs::path fifo = dir_ / "fifo";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  EXPECT_NE(error_of(fifo).find("is a FIFO, not a regular file"), std::string::npos);
  const fs::path zero = dir_ / "zero";
  fs::create_symlink("/dev/zero", zero);
  EXPECT_NE(error_of(zero).find("is a character device"), std::string::npos);
  EXPECT_NE(error_of(dir_).find("is a directory"), std::string::npos);
  const fs::path loop = dir_ / "loop";
  fs::create_symlink("loop", loop);
  EXPECT_NE(error_of(loop).find("Too many levels of symbolic links"), std::string::npos);
  EXPECT_NE(error_of(dir_ / "missing").find("missing' cannot be opened"), std::string::npos);
}

TEST_F(InputFileTest, BoundsTheSizeAndReadsWhatItAccepts) {
  const fs::path path = dir_ / "text";
  const std::string text("one\ntwo\0three\n\nlast", 19);
  std::ofstream(path, std::ios::binary) << text;
  EXPECT_NE(error_of(path, 18).find("is 19 bytes, more than the 18 bytes"), std::string::npos);
  EXPECT_EQ(read_input_file(path, "test file", 19), text);
  InputFile file(path, "test file", kAnySize);
  std::string line;
  std::vector<std::string> lines;
  while (file.read_line(line)) lines.push_back(line);
  EXPECT_EQ(lines, (std::vector<std::string>{"one", std::string("two\0three", 9), "", "last"}));
}

}  // namespace
}  // namespace maxctx

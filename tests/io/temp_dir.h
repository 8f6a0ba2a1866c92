// A fresh directory under the system temp dir for one test, removed with everything in it when
// the object goes away. Named by process id and a counter, so parallel ctest runs never collide.
#pragma once

#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <string>

namespace maxctx::io {

class TempDir {
 public:
  TempDir() {
    static std::atomic<int> counter{0};
    path_ = std::filesystem::temp_directory_path() /
            ("maxctx_io_test_" + std::to_string(::getpid()) + "_" + std::to_string(counter++));
    std::filesystem::remove_all(path_);
    std::filesystem::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ignored;
    std::filesystem::remove_all(path_, ignored);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
};

}  // namespace maxctx::io

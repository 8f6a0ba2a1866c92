// What every harness does with libFuzzer's bytes: the loaders under test read files (that is
// their interface, and the file handling is part of what is fuzzed), so the input is written to
// a file of this process in /dev/shm (memory, not disk) and the loader is given its path.
//
// A maxctx::Error is the loader refusing the input, the expected outcome for most inputs; any
// other exception, a failed MAXCTX_CHECK, a crash, a sanitizer report, a leak or a timeout is a
// finding.
#pragma once

#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>

#include "maxctx/core/check.h"

namespace maxctx::fuzz {

// Writes data to <dir>/<name> and returns that path. <dir> is $MAXCTX_FUZZ_DIR when set
// (fuzz/run.sh sets a fixed one, so that the paths in error messages, and with them the code
// paths, do not vary with the process id between reproducible runs), else
// /dev/shm/maxctx_fuzz_<pid>; created once, removed at exit.
inline std::filesystem::path write_input(const uint8_t* data, size_t size, const char* name) {
  static const std::filesystem::path dir = [] {
    const char* given = std::getenv("MAXCTX_FUZZ_DIR");
    static const std::filesystem::path d =
        given != nullptr && *given != '\0'
            ? std::filesystem::path(given)
            : std::filesystem::path("/dev/shm") / ("maxctx_fuzz_" + std::to_string(::getpid()));
    std::filesystem::create_directories(d);
    std::atexit([] {
      std::error_code ignored;
      std::filesystem::remove_all(d, ignored);
    });
    return d;
  }();
  const std::filesystem::path path = dir / name;
  FILE* file = std::fopen(path.c_str(), "wb");
  if (file == nullptr) std::abort();
  if (size > 0 && std::fwrite(data, 1, size, file) != size) std::abort();
  std::fclose(file);
  return path;
}

// Runs `load`; a maxctx::Error is a refusal (fine), anything else propagates to libFuzzer.
template <typename F>
void expect_load_or_refusal(F&& load) {
  try {
    load();
  } catch (const Error&) {
  }
}

}  // namespace maxctx::fuzz

#include "maxctx/io/output_path.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>

#include "maxctx/core/check.h"

namespace maxctx::io {

namespace fs = std::filesystem;

namespace {

// Writes and removes a probe file in the directory `dir`; the reason it cannot, or "".
// Permissions alone do not say it (root, read-only mounts, ACLs): a probe file does.
std::string probe_problem(const fs::path& dir) {
  const fs::path probe = dir / fmt::format(".maxctx-write-check-{}", ::getpid());
  const int fd = ::open(probe.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0) return std::strerror(errno);
  ::close(fd);
  std::error_code ignored;
  fs::remove(probe, ignored);
  return "";
}

// Why `dir` could not be made and written, or "": the nearest part of the path that exists must
// be a directory a probe file can be written in.
std::string output_directory_problem(const fs::path& dir) {
  fs::path existing = dir.empty() ? fs::path(".") : dir;
  std::error_code error;
  while (!fs::exists(fs::symlink_status(existing, error)) && existing.has_relative_path() &&
         existing.has_parent_path()) {
    existing = existing.parent_path();
  }
  if (!fs::exists(existing, error)) existing = ".";  // a relative path's first part is absent
  if (!fs::is_directory(existing, error)) {
    return existing == dir ? std::string("not a directory")
                           : fmt::format("'{}' is not a directory", existing.string());
  }
  return probe_problem(existing);
}

}  // namespace

void check_output_directory(const fs::path& dir, std::string_view what) {
  const std::string problem = output_directory_problem(dir);
  if (!problem.empty()) fail("{} '{}' cannot be written: {}", what, dir.string(), problem);
}

void check_output_file(const fs::path& path, std::string_view what) {
  const fs::path parent = path.parent_path().empty() ? fs::path(".") : path.parent_path();
  const std::string problem = output_directory_problem(parent);
  if (!problem.empty()) {
    fail("{} '{}' cannot be written: its directory '{}': {}", what, path.string(), parent.string(),
         problem);
  }
  std::error_code error;
  const fs::file_status status = fs::status(path, error);
  if (!fs::exists(status)) return;
  if (fs::is_directory(status)) {
    fail("{} '{}' cannot be written: it is a directory", what, path.string());
  }
  const int fd = ::open(path.c_str(), O_WRONLY | O_APPEND | O_CLOEXEC);
  if (fd < 0) fail("{} '{}' cannot be written: {}", what, path.string(), std::strerror(errno));
  ::close(fd);
}

void expect_directory_or_absent(const fs::path& path, std::string_view what) {
  std::error_code error;
  const fs::file_status status = fs::status(path, error);
  if (fs::exists(status) && !fs::is_directory(status)) {
    fail("{} '{}' is not a directory", what, path.string());
  }
}

}  // namespace maxctx::io

#include "maxctx/io/durable_file.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "maxctx/core/check.h"

namespace maxctx::io {
namespace {

std::string errno_text() { return std::strerror(errno); }

}  // namespace

void write_synced_text(const std::filesystem::path& path, const std::string& text) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0644);
  if (fd < 0) fail("cannot create '{}': {}", path.string(), errno_text());
  const char* data = text.data();
  size_t left = text.size();
  bool ok = true;
  while (ok && left > 0) {
    const ssize_t written = ::write(fd, data, left);
    if (written < 0 && errno == EINTR) continue;
    ok = written >= 0;
    if (ok) {
      data += written;
      left -= static_cast<size_t>(written);
    }
  }
  ok = ok && ::fsync(fd) == 0;
  std::string reason = ok ? "" : errno_text();
  if (::close(fd) != 0 && ok) {
    ok = false;
    reason = errno_text();
  }
  if (!ok) fail("cannot write '{}': {}", path.string(), reason);
}

void sync_path(const std::filesystem::path& path, bool directory) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | (directory ? O_DIRECTORY : 0));
  if (fd < 0) fail("cannot open '{}' to sync it: {}", path.string(), errno_text());
  const bool ok = ::fsync(fd) == 0;
  const std::string reason = ok ? "" : errno_text();
  ::close(fd);
  if (!ok) fail("cannot sync '{}': {}", path.string(), reason);
}

std::string close_and_rename(int fd, const std::filesystem::path& tmp,
                             const std::filesystem::path& path, std::string failure) {
  if (::close(fd) != 0 && failure.empty()) failure = errno_text();
  if (failure.empty() && ::rename(tmp.c_str(), path.c_str()) != 0) {
    failure = fmt::format("cannot rename '{}' into place: {}", tmp.string(), errno_text());
  }
  if (!failure.empty()) ::unlink(tmp.c_str());
  return failure;
}

}  // namespace maxctx::io

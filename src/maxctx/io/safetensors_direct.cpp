// Safetensors files written from bytes already laid out as the file holds them
// (write_safetensors_laid_out in safetensors.h): how a checkpoint's staged shard reaches the disk.
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <new>
#include <utility>

#include "maxctx/core/check.h"
#include "maxctx/core/progress.h"
#include "maxctx/io/durable_file.h"
#include "maxctx/io/safetensors.h"

namespace maxctx::io {
namespace {

std::string errno_text() { return std::strerror(errno); }

uint64_t round_up(uint64_t n, uint64_t to) { return (n + to - 1) / to * to; }

// A file being written, by direct I/O where the file system takes it.
struct OutFile {
  int fd = -1;
  bool direct = false;
  OutFile() = default;
  OutFile(const OutFile&) = delete;
  OutFile& operator=(const OutFile&) = delete;
  ~OutFile() {
    if (fd >= 0) ::close(fd);
  }
};

// pwrite(2) until everything is out; false (errno set) on failure. A direct write the file system
// refuses (EINVAL: an alignment it does not support) turns direct I/O off for the rest of the
// file, which then goes through the page cache: the same bytes, only slower for the cores.
bool write_at(OutFile& file, const std::byte* data, uint64_t size, uint64_t offset) {
  while (size > 0) {
    const ssize_t written = ::pwrite(file.fd, data, size, static_cast<off_t>(offset));
    if (written < 0) {
      if (errno == EINTR) continue;
      if (errno != EINVAL || !file.direct) return false;
      const int flags = ::fcntl(file.fd, F_GETFL);
      if (flags < 0 || ::fcntl(file.fd, F_SETFL, flags & ~O_DIRECT) != 0) return false;
      file.direct = false;
      continue;
    }
    data += written;
    size -= static_cast<uint64_t>(written);
    offset += static_cast<uint64_t>(written);
  }
  return true;
}

}  // namespace

void write_safetensors_laid_out(
    const std::filesystem::path& path, std::span<const TensorHeader> tensors,
    const std::map<std::string, std::string>& metadata, std::span<const std::byte> data,
    const std::function<void(uint64_t written, uint64_t total)>& before_chunk) {
  const auto bad_write = [&](const std::string& what) {
    fail("cannot write safetensors file '{}': {}", path.string(), what);
  };
  const SafetensorsLayout layout = safetensors_layout(path, tensors, metadata, kDirectIoAlignment);
  if (data.size() != layout.data_bytes) {
    bad_write(fmt::format("the tensors need {} bytes, the laid-out data holds {}",
                          layout.data_bytes, data.size()));
  }
  MAXCTX_CHECK(reinterpret_cast<uintptr_t>(data.data()) % kDirectIoAlignment == 0,
               "laid-out safetensors data must begin on a {}-byte boundary", kDirectIoAlignment);
  // The header (a few KB, a whole number of blocks) from an aligned copy, so that it can go the
  // same way as the data.
  const uint64_t header_bytes = layout.header.size();
  const std::unique_ptr<std::byte, decltype(&std::free)> header(
      static_cast<std::byte*>(std::aligned_alloc(kDirectIoAlignment, header_bytes)), &std::free);
  if (!header) throw std::bad_alloc();
  std::memcpy(header.get(), layout.header.data(), header_bytes);

  std::filesystem::path tmp = path;
  tmp += ".tmp";
  OutFile file;
  // O_NOFOLLOW: a symlink planted at the name must not redirect the write (issue #34 N7).
  constexpr int kFlags = O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW;
  file.fd = ::open(tmp.c_str(), kFlags | O_DIRECT, 0644);
  file.direct = file.fd >= 0;
  if (file.fd < 0 && errno == EINVAL) file.fd = ::open(tmp.c_str(), kFlags, 0644);
  if (file.fd < 0) bad_write(fmt::format("cannot create '{}': {}", tmp.string(), errno_text()));
  std::string reason;
  try {
    bool ok = write_at(file, header.get(), header_bytes, 0);
    // Whole blocks: the last runs past the data into the buffer's padding, which the truncation
    // below cuts off again.
    const uint64_t blocks = round_up(data.size(), kDirectIoAlignment);
    // At most 64 MiB a call (progress noted after each) and at least two calls for more than a
    // block, so that before_chunk also runs in the middle of a small file (the fault tests).
    const uint64_t chunk = std::clamp(round_up(blocks / 2, kDirectIoAlignment), kDirectIoAlignment,
                                      uint64_t{64} << 20);
    for (uint64_t done = 0; ok && done < blocks; done += chunk) {
      if (before_chunk) before_chunk(done, data.size());
      ok = write_at(file, data.data() + done, std::min(chunk, blocks - done), header_bytes + done);
      note_progress();  // a large shard is written while the other ranks wait (core/progress.h)
    }
    ok = ok && ::ftruncate(file.fd, static_cast<off_t>(header_bytes + data.size())) == 0 &&
         ::fsync(file.fd) == 0;
    if (!ok) reason = errno_text();
  } catch (...) {
    ::unlink(tmp.c_str());
    throw;
  }
  reason = close_and_rename(std::exchange(file.fd, -1), tmp, path, std::move(reason));
  if (!reason.empty()) bad_write(reason);
}

}  // namespace maxctx::io

#include "maxctx/core/input_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "maxctx/core/check.h"

namespace maxctx {
namespace {

const char* kind_of(mode_t mode) {
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISSOCK(mode)) return "a socket";
  return "not a regular file";
}

}  // namespace

InputFile::InputFile(const std::filesystem::path& path, std::string_view what, int64_t max_bytes)
    : path_(path), what_(what) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) fail("{} '{}' cannot be opened: {}", what_, path_.string(), std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const int error = errno;
    ::close(fd);
    fail("{} '{}' cannot be read: {}", what_, path_.string(), std::strerror(error));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    fail("{} '{}' is {}, not a regular file", what_, path_.string(), kind_of(st.st_mode));
  }
  if (st.st_size > max_bytes) {
    ::close(fd);
    fail("{} '{}' is {} bytes, more than the {} bytes such a file may hold", what_, path_.string(),
         st.st_size, max_bytes);
  }
  // Back to blocking reads: O_NONBLOCK only kept the open of a FIFO from waiting.
  ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) & ~O_NONBLOCK);
  fd_ = fd;
  size_ = st.st_size;
}

InputFile::~InputFile() {
  std::free(line_buffer_);
  if (stream_ != nullptr) {
    std::fclose(stream_);  // closes fd_ too
  } else if (fd_ >= 0) {
    ::close(fd_);
  }
}

int64_t InputFile::read_at(void* out, int64_t bytes, int64_t offset) {
  auto* to = static_cast<char*>(out);
  int64_t done = 0;
  while (done < bytes) {
    const ssize_t got = ::pread(fd_, to + done, static_cast<size_t>(bytes - done),
                                static_cast<off_t>(offset + done));
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) fail("{} '{}': read failed: {}", what_, path_.string(), std::strerror(errno));
    if (got == 0) break;  // the end, or shrank while read
    done += got;
  }
  return done;
}

std::string InputFile::read_all() {
  std::string text(static_cast<size_t>(size_), '\0');
  text.resize(static_cast<size_t>(read_at(text.data(), size_, 0)));
  return text;
}

bool InputFile::read_line(std::string& line) {
  if (stream_ == nullptr) {
    stream_ = ::fdopen(fd_, "r");
    if (stream_ == nullptr) fail("{} '{}': {}", what_, path_.string(), std::strerror(errno));
  }
  errno = 0;  // getline(3): the length it returns counts NUL bytes too
  const ssize_t got = ::getline(&line_buffer_, &line_capacity_, stream_);
  const int error = errno;
  line.clear();
  if (got > 0) line.assign(line_buffer_, static_cast<size_t>(got));
  if (got < 0) {
    if (std::ferror(stream_)) {
      fail("{} '{}': read failed: {}", what_, path_.string(), std::strerror(error));
    }
    return false;
  }
  if (!line.empty() && line.back() == '\n') line.pop_back();
  return true;
}

std::string read_input_file(const std::filesystem::path& path, std::string_view what,
                            int64_t max_bytes) {
  return InputFile(path, what, max_bytes).read_all();
}

}  // namespace maxctx

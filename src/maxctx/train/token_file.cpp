#include "maxctx/train/token_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <bit>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>
#include <vector>

#include "maxctx/core/check.h"
#include "maxctx/core/input_file.h"

namespace maxctx {
namespace {

static_assert(std::endian::native == std::endian::little, "token files are little-endian");

constexpr char kMagic[8] = {'M', 'X', 'C', 'T', 'O', 'K', 'E', 'N'};
constexpr uint32_t kVersion = 1;
constexpr uint32_t kIndexedVersion = 2;
constexpr size_t kHeaderBytes = 32;

struct Header {
  char magic[8];
  uint32_t version;
  uint32_t width;
  uint32_t eos_id;
  uint32_t reserved;
  uint64_t count;
};
static_assert(sizeof(Header) == kHeaderBytes);

}  // namespace

TokenFileWriter::TokenFileWriter(const std::string& path, uint32_t eos_id, TokenWidth width,
                                 bool document_index)
    : path_(path),
      file_(std::fopen(path.c_str(), "wb"), &std::fclose),
      eos_id_(eos_id),
      width_(width),
      document_index_(document_index) {
  const uint32_t bytes = static_cast<uint32_t>(width);
  if (eos_id > limit()) fail("token file {}: eos_id {} does not fit {} bytes", path, eos_id, bytes);
  if (!file_) fail("token file {}: cannot open for writing: {}", path, std::strerror(errno));
  write_header();  // count 0 until finish()
}

TokenFileWriter::~TokenFileWriter() = default;

uint64_t TokenFileWriter::limit() const {
  return width_ == TokenWidth::kUInt16 ? 0xffffull : 0xffffffffull;
}

void TokenFileWriter::write_header() {
  Header header{};
  std::memcpy(header.magic, kMagic, sizeof(kMagic));
  header.version = document_index_ ? kIndexedVersion : kVersion;
  header.width = static_cast<uint32_t>(width_);
  header.eos_id = eos_id_;
  header.count = count_;
  if (std::fseek(file_.get(), 0, SEEK_SET) != 0 ||
      std::fwrite(&header, sizeof(header), 1, file_.get()) != 1) {
    fail("token file {}: write failed: {}", path_, std::strerror(errno));
  }
}

void TokenFileWriter::append(std::span<const int32_t> tokens) {
  const uint32_t bytes = static_cast<uint32_t>(width_);
  staging_.resize(tokens.size() * bytes);
  for (size_t i = 0; i < tokens.size(); ++i) {
    if (tokens[i] < 0 || static_cast<uint64_t>(tokens[i]) > limit()) {
      fail("token file {}: token {} at index {} does not fit an unsigned {}-byte id", path_,
           tokens[i], count_ + i, bytes);
    }
    const uint32_t id = static_cast<uint32_t>(tokens[i]);
    if (width_ == TokenWidth::kUInt16) {
      const uint16_t narrow = static_cast<uint16_t>(id);
      std::memcpy(&staging_[i * 2], &narrow, 2);
    } else {
      std::memcpy(&staging_[i * 4], &id, 4);
    }
  }
  if (!staging_.empty() && std::fwrite(staging_.data(), staging_.size(), 1, file_.get()) != 1) {
    fail("token file {}: write failed: {}", path_, std::strerror(errno));
  }
  count_ += tokens.size();
}

void TokenFileWriter::end_document() {
  MAXCTX_CHECK(document_index_, "end_document() on a token file without a document index");
  const uint64_t last = document_ends_.empty() ? 0 : document_ends_.back();
  MAXCTX_CHECK(count_ > last, "token file {}: an empty document", path_);
  document_ends_.push_back(count_);
}

void TokenFileWriter::finish() {
  if (document_index_) {
    MAXCTX_CHECK(count_ == (document_ends_.empty() ? 0 : document_ends_.back()),
                 "token file {}: the last {} tokens are in no ended document", path_,
                 count_ - (document_ends_.empty() ? 0 : document_ends_.back()));
    const uint64_t n = document_ends_.size();
    if ((n > 0 && std::fwrite(document_ends_.data(), sizeof(uint64_t), n, file_.get()) != n) ||
        std::fwrite(&n, sizeof(n), 1, file_.get()) != 1) {
      fail("token file {}: write failed: {}", path_, std::strerror(errno));
    }
  }
  write_header();
  if (std::fclose(file_.release()) != 0) {
    fail("token file {}: close failed: {}", path_, std::strerror(errno));
  }
}

void write_token_file(const std::string& path, std::span<const int32_t> tokens, uint32_t eos_id,
                      TokenWidth width) {
  TokenFileWriter writer(path, eos_id, width);
  writer.append(tokens);
  writer.finish();
}

TokenFile::TokenFile(const std::string& path) : path_(path) {
  const InputFile file(path, "token file", kAnySize);  // the mapping keeps the file alive
  const int fd = file.fd();
  const auto file_bytes = static_cast<uint64_t>(file.size());
  Header header{};
  if (file_bytes < kHeaderBytes ||
      ::pread(fd, &header, sizeof(header), 0) != static_cast<ssize_t>(sizeof(header))) {
    fail("token file {}: truncated: {} bytes, shorter than the {}-byte header", path, file_bytes,
         kHeaderBytes);
  }
  // Checked in this order so that a file of another format says "bad magic", not "truncated".
  if (std::memcmp(header.magic, kMagic, sizeof(kMagic)) != 0) {
    fail("token file {}: bad magic (not a maxctx token file; expected \"MXCTOKEN\")", path);
  }
  if (header.version != kVersion && header.version != kIndexedVersion) {
    fail("token file {}: version {} is not supported (this build reads versions {} and {})", path,
         header.version, kVersion, kIndexedVersion);
  }
  if (header.width != 2 && header.width != 4) {
    fail("token file {}: {} bytes per token is not a known dtype (2 = uint16, 4 = uint32)", path,
         header.width);
  }
  const bool overflows = header.count > (UINT64_MAX - kHeaderBytes - 8) / header.width;
  const uint64_t ids_end = overflows ? UINT64_MAX : kHeaderBytes + header.count * header.width;
  uint64_t documents = 0;  // version 2: the index's length, read from the file's last 8 bytes
  if (header.version == kIndexedVersion && !overflows && file_bytes >= ids_end + 8) {
    if (::pread(fd, &documents, 8, static_cast<off_t>(file_bytes - 8)) != 8) {
      fail("token file {}: cannot read the document index: {}", path, std::strerror(errno));
    }
    if (documents > (file_bytes - ids_end - 8) / 8) {
      fail("token file {}: the document index says {} documents; the file holds room for {}", path,
           documents, (file_bytes - ids_end - 8) / 8);
    }
  }
  const uint64_t expected =
      header.version == kIndexedVersion && !overflows ? ids_end + 8 * documents + 8 : ids_end;
  if (file_bytes != expected) {
    fail("token file {}: {}: {} bytes, but the header says {} tokens of {} bytes = {} bytes", path,
         file_bytes < expected ? "truncated" : "trailing bytes after the tokens", file_bytes,
         header.count, header.width, expected);
  }
  void* map = ::mmap(nullptr, file_bytes, PROT_READ, MAP_PRIVATE, fd, 0);
  if (map == MAP_FAILED) fail("token file {}: cannot map: {}", path, std::strerror(errno));
  map_ = static_cast<const unsigned char*>(map);
  map_bytes_ = file_bytes;
  ids_ = map_ + kHeaderBytes;
  count_ = static_cast<int64_t>(header.count);
  eos_id_ = header.eos_id;
  width_ = static_cast<TokenWidth>(header.width);
  if (header.version == kIndexedVersion) {
    document_starts_.reserve(documents);
    uint64_t start = 0;
    for (uint64_t d = 0; d < documents; ++d) {
      uint64_t end;
      std::memcpy(&end, map_ + ids_end + 8 * d, 8);
      if (end <= start || end > header.count) {
        fail("token file {}: document {} ends at {}, not in ({}, {}] (the index must ascend)", path,
             d, end, start, header.count);
      }
      document_starts_.push_back(static_cast<int64_t>(start));
      start = end;
    }
    if (start != header.count) {
      fail("token file {}: the document index ends at token {}, the file holds {}", path, start,
           header.count);
    }
  }
}

TokenFile::~TokenFile() {
  if (map_ != nullptr) ::munmap(const_cast<unsigned char*>(map_), map_bytes_);
}

uint32_t TokenFile::at(int64_t index) const {
  MAXCTX_CHECK(index >= 0 && index < count_, "token {} outside [0, {})", index, count_);
  if (width_ == TokenWidth::kUInt16) {
    uint16_t id;
    std::memcpy(&id, ids_ + index * 2, 2);
    return id;
  }
  uint32_t id;
  std::memcpy(&id, ids_ + index * 4, 4);
  return id;
}

void TokenFile::read(int64_t begin, std::span<int32_t> out) const {
  const auto n = static_cast<int64_t>(out.size());
  MAXCTX_CHECK(begin >= 0 && begin + n <= count_, "tokens [{}, {}) outside [0, {})", begin,
               begin + n, count_);
  if (width_ == TokenWidth::kUInt16) {
    for (int64_t i = 0; i < n; ++i) {
      uint16_t id;
      std::memcpy(&id, ids_ + (begin + i) * 2, 2);
      out[static_cast<size_t>(i)] = id;
    }
  } else {
    for (int64_t i = 0; i < n; ++i) {
      uint32_t id;
      std::memcpy(&id, ids_ + (begin + i) * 4, 4);
      out[static_cast<size_t>(i)] = static_cast<int32_t>(id);
    }
  }
}

}  // namespace maxctx

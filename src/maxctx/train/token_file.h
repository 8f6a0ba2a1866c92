// maxctx's binary token file: a 32-byte header, then `count` token ids, little-endian.
//
//   offset  size  field
//        0     8  magic "MXCTOKEN"
//        8     4  version (uint32) = 1
//       12     4  bytes per token (uint32): 2 = uint16 ids, 4 = uint32 ids
//       16     4  eos_id (uint32): the document separator; a document ends with it
//       20     4  reserved, 0
//       24     8  count (uint64): number of token ids that follow
//       32     .  count ids of the given width
//
// Documents are concatenated, each ending with eos_id (the last may end at the end of the file
// instead). The file size must be exactly 32 + count·width. The reader maps the file and copies
// only the ids asked for; it checks the header and the size, not the ids (the data source does).
#pragma once

#include <cstdint>
#include <cstdio>
#include <memory>
#include <span>
#include <string>
#include <vector>

namespace maxctx {

enum class TokenWidth : uint32_t { kUInt16 = 2, kUInt32 = 4 };

// Writes a token file; maxctx::Error if a token is negative or does not fit the width, or the
// file cannot be written.
void write_token_file(const std::string& path, std::span<const int32_t> tokens, uint32_t eos_id,
                      TokenWidth width);

// Writes a token file a piece at a time (a corpus tokenized as it streams): the header's count is
// filled in by finish(). Until finish() returns the file is incomplete (readers refuse its size).
class TokenFileWriter {
 public:
  TokenFileWriter(const std::string& path, uint32_t eos_id, TokenWidth width);
  ~TokenFileWriter();
  TokenFileWriter(const TokenFileWriter&) = delete;
  TokenFileWriter& operator=(const TokenFileWriter&) = delete;

  void append(std::span<const int32_t> tokens);
  void finish();
  uint64_t count() const { return count_; }

 private:
  uint64_t limit() const;
  void write_header();

  std::string path_;
  std::unique_ptr<FILE, int (*)(FILE*)> file_;
  uint32_t eos_id_;
  TokenWidth width_;
  uint64_t count_ = 0;
  std::vector<unsigned char> staging_;
};

// A read-only memory map of a token file. Errors (maxctx::Error, one line naming the path): the
// file is missing or unreadable, shorter than its header or than header + count·width (truncated),
// longer (trailing bytes), bad magic, an unknown version, an unknown width.
class TokenFile {
 public:
  explicit TokenFile(const std::string& path);
  ~TokenFile();
  TokenFile(const TokenFile&) = delete;
  TokenFile& operator=(const TokenFile&) = delete;

  int64_t count() const { return count_; }
  uint32_t eos_id() const { return eos_id_; }
  TokenWidth width() const { return width_; }
  const std::string& path() const { return path_; }

  uint32_t at(int64_t index) const;
  // Ids [begin, begin + out.size()) into out; the range must lie inside the file.
  void read(int64_t begin, std::span<int32_t> out) const;

 private:
  std::string path_;
  const unsigned char* map_ = nullptr;  // the whole file, read-only
  size_t map_bytes_ = 0;
  const unsigned char* ids_ = nullptr;  // map_ + header
  int64_t count_ = 0;
  uint32_t eos_id_ = 0;
  TokenWidth width_ = TokenWidth::kUInt16;
};

}  // namespace maxctx

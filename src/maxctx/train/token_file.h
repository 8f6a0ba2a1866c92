// maxctx's binary token file: a 32-byte header, then `count` token ids, little-endian.
//
//   offset  size  field
//        0     8  magic "MXCTOKEN"
//        8     4  version (uint32): 1, or 2 with a document index
//       12     4  bytes per token (uint32): 2 = uint16 ids, 4 = uint32 ids
//       16     4  eos_id (uint32): the document separator of a version 1 file
//       20     4  reserved, 0
//       24     8  count (uint64): number of token ids that follow
//       32     .  count ids of the given width
// version 2 only, after the ids:
//        .   8·n  n document ends (uint64, ascending, the last = count): document d is the ids
//                 [end[d-1], end[d])
//        .     8  n (uint64)
//
// Version 1: documents are concatenated, each ending with eos_id (the last may end at the end of
// the file instead), so an EOS id inside a document would split it. Version 2 (what
// dataset_type=hf writes) records where each document ends, so a document's own EOS ids (a chat
// turn's <|im_end|>) stay inside it, as MaxText packs per input document. The file size must be
// exactly what the header (and the index) say. The reader maps the file and copies only the ids
// asked for; it checks the header, the size and the index, not the ids (the data source does).
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
  // `document_index`: write version 2, whose documents end where end_document() says.
  TokenFileWriter(const std::string& path, uint32_t eos_id, TokenWidth width,
                  bool document_index = false);
  ~TokenFileWriter();
  TokenFileWriter(const TokenFileWriter&) = delete;
  TokenFileWriter& operator=(const TokenFileWriter&) = delete;

  void append(std::span<const int32_t> tokens);
  // The tokens appended since the last end_document() are one document (version 2 only).
  void end_document();
  void finish();
  uint64_t count() const { return count_; }

 private:
  uint64_t limit() const;
  void write_header();

  std::string path_;
  std::unique_ptr<FILE, int (*)(FILE*)> file_;
  uint32_t eos_id_;
  TokenWidth width_;
  bool document_index_;
  uint64_t count_ = 0;
  std::vector<uint64_t> document_ends_;
  std::vector<unsigned char> staging_;
};

// A read-only memory map of a token file. Errors (maxctx::Error, one line naming the path): the
// file is missing or unreadable, shorter than its header or than header + count·width (truncated),
// longer (trailing bytes), bad magic, an unknown version, an unknown width, a document index that
// is not ascending or does not end at count.
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

  // Version 2: the first token of every document, ascending, [0] = 0 (empty for version 1,
  // whose documents are found by their EOS ids).
  const std::vector<int64_t>& document_starts() const { return document_starts_; }
  bool has_document_index() const { return !document_starts_.empty(); }

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
  std::vector<int64_t> document_starts_;
};

}  // namespace maxctx

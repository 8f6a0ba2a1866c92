#include "maxctx/train/data_tokens.h"

#include <fmt/format.h>

#include <algorithm>

#include "maxctx/core/check.h"

namespace maxctx {

std::vector<int64_t> scan_documents(const TokenFile& file, const TokenDataOptions& options) {
  const std::string& path = file.path();
  const int64_t vocab_size = options.vocab_size;
  if (vocab_size < 1 || vocab_size > INT32_MAX) {
    fail("vocab_size = {} must be in [1, 2^31)", vocab_size);
  }
  if (file.eos_id() != options.eos_id) {
    fail(
        "token file {} separates documents with eos_id {}, but the config says eos_id = {}; "
        "set eos_id={}",
        path, file.eos_id(), options.eos_id, file.eos_id());
  }
  if (file.count() == 0) fail("token file {} holds no tokens", path);
  constexpr int64_t kBlock = int64_t{1} << 20;
  std::vector<int32_t> block(static_cast<size_t>(std::min(kBlock, file.count())));
  // A version 2 file says where its documents end; a version 1 file ends one at each EOS.
  const bool indexed = file.has_document_index();
  std::vector<int64_t> starts = indexed ? file.document_starts() : std::vector<int64_t>{0};
  for (int64_t begin = 0; begin < file.count(); begin += kBlock) {
    const int64_t n = std::min(kBlock, file.count() - begin);
    file.read(begin, std::span<int32_t>(block).first(static_cast<size_t>(n)));
    for (int64_t i = 0; i < n; ++i) {
      const auto id = static_cast<uint32_t>(block[static_cast<size_t>(i)]);
      if (id >= static_cast<uint64_t>(vocab_size)) {
        fail("token file {}: token {} at index {} is >= vocab_size = {}", file.path(), id,
             begin + i, vocab_size);
      }
      const int64_t next = begin + i + 1;
      if (!indexed && id == file.eos_id() && next < file.count()) starts.push_back(next);
    }
  }
  return starts;
}

TokenFileSource::TokenFileSource(const TokenDataOptions& options)
    : DataSource(options.seq_len),
      options_(options),
      file_(options.path),
      doc_starts_(scan_documents(file_, options)) {
  if (options.packing) {
    const int64_t seq = options.seq_len;
    const int64_t count = file_.count();
    int64_t pos = 0;
    size_t doc = 0;  // the document that holds token `pos`
    while (pos < count) {
      row_starts_.push_back(pos);
      int64_t fill = 0;
      while (pos < count) {
        const int64_t doc_end = doc + 1 < doc_starts_.size() ? doc_starts_[doc + 1] : count;
        const int64_t rest = doc_end - pos;
        if (fill + rest <= seq) {
          fill += rest;
          pos = doc_end;
          ++doc;
        } else {
          // Too long for an empty row: split it. Otherwise it moves whole to the next row.
          if (fill == 0) pos += seq;
          break;
        }
      }
    }
    row_starts_.push_back(count);
  }
}

std::string TokenFileSource::describe() const {
  return fmt::format(
      "tokens: {} ({} tokens of {} bytes, {} documents, eos_id {}), {} rows of {} per epoch, "
      "packing={}, shuffle={} (seed {})",
      file_.path(), file_.count(), static_cast<uint32_t>(file_.width()), num_documents(),
      file_.eos_id(), rows_per_epoch(), seq_len(), options_.packing, options_.shuffle,
      options_.seed);
}

int64_t TokenFileSource::rows_per_epoch() const {
  return options_.packing ? static_cast<int64_t>(row_starts_.size()) - 1 : num_documents();
}

TokenRange TokenFileSource::row_span(int64_t row) const {
  MAXCTX_CHECK(row >= 0 && row < rows_per_epoch(), "row {} outside [0, {})", row, rows_per_epoch());
  if (options_.packing) return {row_starts_[row], row_starts_[row + 1]};
  const int64_t start = doc_starts_[row];
  const int64_t doc_end = row + 1 < num_documents() ? doc_starts_[row + 1] : file_.count();
  return {start, std::min(doc_end, start + seq_len())};
}

int64_t TokenFileSource::document_of(int64_t token) const {
  const auto after = std::upper_bound(doc_starts_.begin(), doc_starts_.end(), token);
  return static_cast<int64_t>(after - doc_starts_.begin()) - 1;
}

void TokenFileSource::fill_row(int64_t row, std::span<const TokenRange> ranges,
                               RowSlices out) const {
  const int64_t physical = row_in_epoch(row, rows_per_epoch(), options_.shuffle, options_.seed);
  const TokenRange span = row_span(physical);
  const int64_t first_doc = document_of(span.begin);

  std::fill(out.tokens.begin(), out.tokens.end(), 0);
  std::fill(out.targets.begin(), out.targets.end(), 0);
  std::fill(out.positions.begin(), out.positions.end(), 0);
  std::fill(out.segment_ids.begin(), out.segment_ids.end(), 0);
  std::fill(out.target_segment_ids.begin(), out.target_segment_ids.end(), 0);

  size_t at = 0;
  for (const TokenRange& range : ranges) {
    // Columns past the row's tokens are padding and stay 0.
    const int64_t real = std::clamp<int64_t>(span.size() - range.begin, 0, range.size());
    if (real > 0) {
      const int64_t first = span.begin + range.begin;
      file_.read(first, out.tokens.subspan(at, static_cast<size_t>(real)));
      // The next token of each: one more read, stopping at the end of the file.
      const int64_t next_count = std::min(real, file_.count() - first - 1);
      file_.read(first + 1, out.targets.subspan(at, static_cast<size_t>(next_count)));
      int64_t doc = document_of(first);
      int64_t doc_start = std::max(span.begin, doc_starts_[static_cast<size_t>(doc)]);
      const auto doc_end = [&] {
        return doc + 1 < num_documents() ? doc_starts_[static_cast<size_t>(doc + 1)]
                                         : file_.count();
      };
      for (int64_t k = 0; k < real; ++k) {
        const size_t c = at + static_cast<size_t>(k);
        const int64_t token = first + k;
        if (token == doc_end()) {
          ++doc;
          doc_start = token;
        }
        const auto segment = static_cast<int32_t>(doc - first_doc + 1);
        out.positions[c] = static_cast<int32_t>(token - doc_start);
        out.segment_ids[c] = segment;
        // A document's last token has no next token of its own; an EOS inside it does.
        const bool scored = token + 1 < doc_end();
        if (scored) {
          out.target_segment_ids[c] = segment;
        } else {
          out.targets[c] = 0;
        }
      }
    }
    at += static_cast<size_t>(range.size());
  }
}

}  // namespace maxctx

#include "maxctx/train/data_first_fit.h"

#include <fmt/format.h>

#include <algorithm>

#include "maxctx/core/check.h"

namespace maxctx {

FirstFitSource::FirstFitSource(const TokenDataOptions& options, int64_t bins)
    : DataSource(options.seq_len), options_(options), bins_(bins), file_(options.path) {
  MAXCTX_CHECK(options.packing, "first-fit rows are packed rows");
  if (bins < 1) fail("first-fit packing needs at least one open row (got {})", bins);
  doc_starts_ = scan_documents(file_, options);
  const std::vector<int64_t>& doc_starts = doc_starts_;
  documents_ = static_cast<int64_t>(doc_starts.size());
  const int64_t seq = options.seq_len;

  struct OpenRow {
    std::vector<TokenRange> pieces;
    int64_t fill = 0;
  };
  std::vector<OpenRow> open(static_cast<size_t>(bins));
  const auto close = [&] {
    for (OpenRow& row : open) {
      if (row.pieces.empty()) continue;
      row_starts_.push_back(static_cast<int64_t>(pieces_.size()));
      pieces_.insert(pieces_.end(), row.pieces.begin(), row.pieces.end());
      row = OpenRow();
    }
  };
  for (size_t d = 0; d < doc_starts.size(); ++d) {
    const int64_t doc_end = d + 1 < doc_starts.size() ? doc_starts[d + 1] : file_.count();
    for (int64_t begin = doc_starts[d]; begin < doc_end; begin += seq) {
      const TokenRange piece{begin, std::min(doc_end, begin + seq)};
      auto fits = std::find_if(open.begin(), open.end(),
                               [&](const OpenRow& row) { return row.fill + piece.size() <= seq; });
      if (fits == open.end()) {
        close();  // every open row is non-empty here: an empty one fits any piece
        fits = open.begin();
      }
      fits->pieces.push_back(piece);
      fits->fill += piece.size();
    }
  }
  close();
  row_starts_.push_back(static_cast<int64_t>(pieces_.size()));
}

std::string FirstFitSource::describe() const {
  return fmt::format(
      "tokens: {} ({} tokens, {} documents, eos_id {}), {} rows of {} per epoch packed first-fit "
      "over {} open rows ({:.1f}% filled), shuffle={} (seed {})",
      file_.path(), file_.count(), documents_, file_.eos_id(), rows_per_epoch(), seq_len(), bins_,
      100.0 * fill_fraction(), options_.shuffle, options_.seed);
}

std::vector<TokenRange> FirstFitSource::row_pieces(int64_t row) const {
  MAXCTX_CHECK(row >= 0 && row < rows_per_epoch(), "row {} outside [0, {})", row, rows_per_epoch());
  return {pieces_.begin() + row_starts_[row], pieces_.begin() + row_starts_[row + 1]};
}

double FirstFitSource::fill_fraction() const {
  return static_cast<double>(file_.count()) / static_cast<double>(rows_per_epoch() * seq_len());
}

void FirstFitSource::fill_row(int64_t row, std::span<const TokenRange> ranges,
                              RowSlices out) const {
  const int64_t physical = row_in_epoch(row, rows_per_epoch(), options_.shuffle, options_.seed);
  for (const std::span<int32_t> array :
       {out.tokens, out.targets, out.positions, out.segment_ids, out.target_segment_ids}) {
    std::fill(array.begin(), array.end(), 0);
  }
  const std::vector<TokenRange> pieces = row_pieces(physical);
  size_t at = 0;  // where `range` starts in out
  for (const TokenRange& range : ranges) {
    int64_t column = 0;  // the row column where piece i starts
    for (size_t i = 0; i < pieces.size(); column += pieces[i].size(), ++i) {
      // The columns of piece i that `range` asks for; columns past the last piece are padding.
      const int64_t lo = std::max(range.begin, column);
      const int64_t hi = std::min(range.end, column + pieces[i].size());
      if (lo >= hi) continue;
      const int64_t n = hi - lo;
      const int64_t first = pieces[i].begin + (lo - column);  // file index of column lo
      const size_t to = at + static_cast<size_t>(lo - range.begin);
      file_.read(first, out.tokens.subspan(to, static_cast<size_t>(n)));
      const int64_t next_count = std::min(n, file_.count() - first - 1);
      file_.read(first + 1, out.targets.subspan(to, static_cast<size_t>(next_count)));
      // The piece's document ends where the next one starts: its last token is unscored, an
      // EOS inside it (version 2 files) is scored like any token.
      const auto next_doc = std::upper_bound(doc_starts_.begin(), doc_starts_.end(), first);
      const int64_t doc_end = next_doc == doc_starts_.end() ? file_.count() : *next_doc;
      for (int64_t k = 0; k < n; ++k) {
        const size_t c = to + static_cast<size_t>(k);
        const auto segment = static_cast<int32_t>(i + 1);
        out.positions[c] = static_cast<int32_t>(lo - column + k);
        out.segment_ids[c] = segment;
        if (first + k + 1 < doc_end) {
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

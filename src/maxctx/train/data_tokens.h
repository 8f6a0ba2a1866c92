// dataset_type=tokens: rows cut from a token file (train/token_file.h), random-access by row.
//
// Documents are those of the file's document index (version 2, train/token_file.h: an EOS inside
// a document stays in it), or in a version 1 file the runs that end with eos_id (EOS belongs to
// its document; the last document may end at the end of the file). Opening the file scans it once:
// every id must be < vocab_size, and the document starts (8 bytes per document) and, with packing,
// the row starts (8 bytes per row) are recorded. After that a row reads only the file bytes of the
// columns asked for.
//  - packing=true: documents are laid into rows of S greedily in file order. A document that
//    does not fit in what is left of a row moves whole to the next row (the rest of the row is
//    padding); one longer than S is split into pieces of S, each piece starting a row with
//    positions restarting at 0 (and the piece after the last full one packs on like any
//    document). Segment ids count the documents of a row 1, 2, 3, ...; positions restart at 0
//    per document.
//  - packing=false: row r is document r, truncated to its first S tokens, padded.
// Targets are the next token of the same document, also across a split or truncation (the
// next token is read past the row's end); the last token of a document (its final EOS, or the
// file's last token) is not scored: target 0, target segment 0. Padding is 0 in all five arrays.
// The rows of an epoch are visited in the order shuffled_index(row, rows, seed, epoch) when
// shuffle is on; past the last row the next epoch starts.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "maxctx/train/data.h"
#include "maxctx/train/token_file.h"

namespace maxctx {

struct TokenDataOptions {
  std::string path;
  int64_t vocab_size = 32000;
  int64_t seq_len = 2048;
  bool packing = true;
  int64_t eos_id = 2;   // must equal the file's eos_id (an error otherwise, never a guess)
  uint64_t seed = 0;    // data_shuffle_seed
  bool shuffle = true;  // maxctx has no key for this yet (MaxText: enable_data_shuffling)
};

// Checks a token file against `options` (vocab_size, eos_id, not empty) and makes one pass over
// it: every id must be < vocab_size (an error naming the file and the index otherwise). Returns
// the first token of every document, ascending, [0] = 0.
std::vector<int64_t> scan_documents(const TokenFile& file, const TokenDataOptions& options);

class TokenFileSource final : public DataSource {
 public:
  explicit TokenFileSource(const TokenDataOptions& options);
  std::string describe() const override;

  int64_t rows_per_epoch() const;
  int64_t num_documents() const { return static_cast<int64_t>(doc_starts_.size()); }
  // The file's tokens [begin, end) that row `row` of an epoch holds, in unshuffled order.
  TokenRange row_span(int64_t row) const;

 private:
  void fill_row(int64_t row, std::span<const TokenRange> ranges, RowSlices out) const override;
  int64_t document_of(int64_t token) const;

  TokenDataOptions options_;
  TokenFile file_;
  std::vector<int64_t> doc_starts_;  // first token of every document, ascending, [0] = 0
  std::vector<int64_t> row_starts_;  // packing: first token of every row, then count()
};

}  // namespace maxctx

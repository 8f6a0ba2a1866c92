// Rows packed first-fit from a token file: MaxText's packing for its Grain and Hugging Face
// pipelines (grain's FirstFitPackIterDataset with num_packing_bins = the batch's rows).
//
// Documents (the file's indexed documents, or in a version 1 file the runs ending with eos_id, the
// EOS included; data_tokens.h) are taken in file order.
// `bins` rows are open at a time; a document goes into the first open row with room for it;
// when none has room, the open rows are closed (they become the next `bins` rows of the epoch,
// in bin order) and a fresh set is opened. At the end of the file the open rows that hold
// anything are closed. A document longer than a row is cut into pieces of at most S tokens,
// each packed like a document of its own (MaxText truncates such a document instead; here no
// text is dropped): positions restart at 0 in every piece, and the last token of a piece keeps
// the next token of its document as a scored target.
// Within a row, the pieces sit one after another from column 0: segment ids 1, 2, 3, ... per
// piece, positions from 0 per piece, targets the next token of the document; a document's last
// token (its EOS, or the file's last token) is unscored (target 0, target segment 0); the rest of
// the row is padding (0 everywhere). Rows are visited in shuffled_index order per epoch when
// shuffle is on. Reading a row reads only the file bytes of the columns asked for.
// Memory: 16 bytes per piece, 8 per row and 8 per document, never the tokens.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "maxctx/train/data.h"
#include "maxctx/train/data_tokens.h"
#include "maxctx/train/token_file.h"

namespace maxctx {

class FirstFitSource final : public DataSource {
 public:
  // `options` as for TokenFileSource (packing must be true); `bins`: rows open at a time (>= 1).
  FirstFitSource(const TokenDataOptions& options, int64_t bins);
  std::string describe() const override;

  int64_t rows_per_epoch() const { return static_cast<int64_t>(row_starts_.size()) - 1; }
  // The file's token ranges row `row` of an epoch holds, in column order (unshuffled).
  std::vector<TokenRange> row_pieces(int64_t row) const;
  // Tokens of real text over the epoch's row capacity.
  double fill_fraction() const;

 private:
  void fill_row(int64_t row, std::span<const TokenRange> ranges, RowSlices out) const override;

  TokenDataOptions options_;
  int64_t bins_;
  TokenFile file_;
  int64_t documents_ = 0;
  std::vector<int64_t> doc_starts_;  // the first token of every document (8 bytes each)
  std::vector<TokenRange> pieces_;   // every row's pieces, row after row
  std::vector<int64_t> row_starts_;  // first piece of each row in pieces_, then pieces_.size()
};

}  // namespace maxctx

// dataset_type=recall: a long-context key-value recall task that maxctx generates itself.
//
// A row of S tokens is a context of C = S − 3·Q tokens followed by Q queries. The context is
// filler with P pairs "PAIR key value" laid over it, pair j at a random offset inside the j-th
// of P equal slots, so the pairs span the whole context. Each query "QUERY key value" asks one
// of the pairs (Q distinct pairs, random order); the target of the query's key is its value and
// only those Q targets are scored (target segment 1), so the only way to score is to find the
// key in the context, wherever it is, and copy the token after it. Keys are distinct within a
// row; values and filler are random. One segment, positions 0..S−1, targets = next token.
// Example, S = 32, vocab 16 (PAIR = 1, QUERY = 2, keys 3..6, values 7..10, filler 11..15),
// P = Q = 2, seed 0, row 0; slots [0, 13) and [13, 26), "|" where the queries start, the scored
// answers (the targets of the key before them) in brackets:
//   13 13 12 11 12 11 1 5 8 15 11 14 11 11 13 12 1 3 9 15 11 15 11 14 14 14 |2 5 [8] 2 3 [9]
// Every value is a pure function of (seed, row): rows are random-access and identical on every
// rank.
#pragma once

#include <cstdint>
#include <span>
#include <string>

#include "maxctx/train/data.h"

namespace maxctx {

struct Config;

struct RecallParams {
  int64_t vocab_size = 0;
  int64_t seq_len = 0;
  int32_t pair_marker = 1;   // "PAIR": a key and its value follow
  int32_t query_marker = 2;  // "QUERY": a key follows; the value after it is the answer
  TokenRange keys;           // token ids [begin, end) keys are drawn from
  TokenRange values;
  TokenRange filler;
  int64_t num_pairs = 0;    // P
  int64_t num_queries = 0;  // Q <= P
};

// Defaults from the vocabulary and the row length: token 0 stays padding, 1 and 2 are the
// markers, the rest is split in thirds (keys, values, filler gets the remainder);
// P = Q = clamp(S / 32, 1, number of keys). maxctx::Error when vocab_size < 6 or S < 6.
RecallParams default_recall_params(int64_t vocab_size, int64_t seq_len);
// The defaults with recall_num_pairs / recall_num_queries applied (0 keeps the default;
// queries default to the pairs), validated.
RecallParams recall_params_from(const Config& config);

// maxctx::Error (one line) when the parameters cannot make a row: ids outside [1, vocab), empty
// or overlapping ranges, fewer keys than pairs, Q outside [1, P], 3·P + 3·Q > S.
void validate_recall_params(const RecallParams& params);

class RecallSource final : public DataSource {
 public:
  RecallSource(const RecallParams& params, uint64_t seed);
  std::string describe() const override;
  const RecallParams& params() const { return params_; }

 private:
  void fill_row(int64_t row, std::span<const TokenRange> ranges, RowSlices out) const override;
  RecallParams params_;
  uint64_t seed_;
};

// Exact-match accuracy on the scored targets (target_segment_ids != 0) of a batch or shard.
// Counts, so that ranks can sum them before dividing.
struct ScoredAccuracy {
  int64_t correct = 0;
  int64_t scored = 0;
  double fraction() const { return scored == 0 ? 0.0 : static_cast<double>(correct) / scored; }
};

// predictions: (rows, seq_len) token ids.
ScoredAccuracy scored_accuracy(std::span<const int32_t> predictions, const Batch& batch);
// logits: (rows, seq_len, vocab_size); the prediction is the first arg max (jnp.argmax).
ScoredAccuracy scored_accuracy_from_logits(std::span<const float> logits, int64_t vocab_size,
                                           const Batch& batch);

}  // namespace maxctx

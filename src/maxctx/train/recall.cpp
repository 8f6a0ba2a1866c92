#include "maxctx/train/recall.h"

#include <fmt/format.h>

#include <algorithm>
#include <numeric>
#include <vector>

#include "maxctx/config/config.h"
#include "maxctx/core/arg_max.h"
#include "maxctx/core/check.h"
#include "maxctx/core/rng.h"

namespace maxctx {
namespace {

// Uniform in [0, bound) from the draw at (stream, index) (Lemire's multiply-shift).
int64_t draw(uint64_t seed, uint64_t stream, uint64_t index, int64_t bound) {
  const uint64_t r = rng::u32_at(seed, stream, index);
  return static_cast<int64_t>((r * static_cast<uint64_t>(bound)) >> 32);
}

bool overlaps(const TokenRange& a, const TokenRange& b) {
  return a.begin < b.end && b.begin < a.end;
}

bool holds(const TokenRange& range, int64_t id) { return id >= range.begin && id < range.end; }

}  // namespace

RecallParams default_recall_params(int64_t vocab_size, int64_t seq_len) {
  if (vocab_size < 6) fail("dataset_type=recall needs vocab_size >= 6, got {}", vocab_size);
  if (seq_len < 6) fail("dataset_type=recall needs max_target_length >= 6, got {}", seq_len);
  RecallParams p;
  p.vocab_size = vocab_size;
  p.seq_len = seq_len;
  const int64_t first = 3;  // 0 padding, 1 PAIR, 2 QUERY
  const int64_t third = (vocab_size - first) / 3;
  p.keys = {first, first + third};
  p.values = {p.keys.end, p.keys.end + third};
  p.filler = {p.values.end, vocab_size};
  p.num_pairs = std::clamp<int64_t>(seq_len / 32, 1, third);
  p.num_queries = p.num_pairs;
  return p;
}

RecallParams recall_params_from(const Config& config) {
  RecallParams p = default_recall_params(config.vocab_size, config.max_target_length);
  if (config.recall_num_pairs < 0 || config.recall_num_queries < 0) {
    fail("recall_num_pairs = {} and recall_num_queries = {} must be >= 0 (0: automatic)",
         config.recall_num_pairs, config.recall_num_queries);
  }
  if (config.recall_num_pairs > 0) p.num_pairs = config.recall_num_pairs;
  p.num_queries = config.recall_num_queries > 0 ? config.recall_num_queries : p.num_pairs;
  validate_recall_params(p);
  return p;
}

void validate_recall_params(const RecallParams& p) {
  const auto in_vocab = [&](const TokenRange& r) {
    return r.begin >= 1 && r.end <= p.vocab_size && r.size() >= 1;
  };
  if (p.pair_marker < 1 || p.pair_marker >= p.vocab_size || p.query_marker < 1 ||
      p.query_marker >= p.vocab_size || p.pair_marker == p.query_marker) {
    fail("recall: markers PAIR = {} and QUERY = {} must be distinct ids in [1, vocab_size = {})",
         p.pair_marker, p.query_marker, p.vocab_size);
  }
  if (!in_vocab(p.keys) || !in_vocab(p.values) || !in_vocab(p.filler)) {
    fail(
        "recall: key [{}, {}), value [{}, {}) and filler [{}, {}) ids must be non-empty ranges "
        "inside [1, vocab_size = {})",
        p.keys.begin, p.keys.end, p.values.begin, p.values.end, p.filler.begin, p.filler.end,
        p.vocab_size);
  }
  const TokenRange ranges[] = {p.keys, p.values, p.filler};
  for (int i = 0; i < 3; ++i) {
    if (holds(ranges[i], p.pair_marker) || holds(ranges[i], p.query_marker) ||
        overlaps(ranges[i], ranges[(i + 1) % 3])) {
      fail("recall: key, value and filler ids and the markers must not overlap");
    }
  }
  if (p.num_pairs < 1 || p.num_pairs > p.keys.size()) {
    fail("recall: {} pairs need that many distinct keys; there are {} (and at least 1 pair)",
         p.num_pairs, p.keys.size());
  }
  if (p.num_queries < 1 || p.num_queries > p.num_pairs) {
    fail("recall: {} queries must be in [1, pairs = {}]", p.num_queries, p.num_pairs);
  }
  if (3 * p.num_pairs + 3 * p.num_queries > p.seq_len) {
    fail("recall: {} pairs and {} queries take {} tokens, more than max_target_length = {}",
         p.num_pairs, p.num_queries, 3 * (p.num_pairs + p.num_queries), p.seq_len);
  }
}

RecallSource::RecallSource(const RecallParams& params, uint64_t seed)
    : DataSource(params.seq_len), params_(params), seed_(seed) {
  validate_recall_params(params_);
}

std::string RecallSource::describe() const {
  const RecallParams& p = params_;
  return fmt::format(
      "recall: rows of {} with {} key-value pairs over the context and {} queries at the end "
      "(keys [{}, {}), values [{}, {}), filler [{}, {}), PAIR {}, QUERY {}), seed {}",
      p.seq_len, p.num_pairs, p.num_queries, p.keys.begin, p.keys.end, p.values.begin, p.values.end,
      p.filler.begin, p.filler.end, p.pair_marker, p.query_marker, seed_);
}

void RecallSource::fill_row(int64_t row, std::span<const TokenRange> ranges, RowSlices out) const {
  static const uint64_t kFiller = rng::stream_id("data.recall.filler");
  static const uint64_t kKeys = rng::stream_id("data.recall.keys");
  static const uint64_t kValues = rng::stream_id("data.recall.values");
  static const uint64_t kOffsets = rng::stream_id("data.recall.offsets");
  static const uint64_t kOrder = rng::stream_id("data.recall.order");
  const RecallParams& p = params_;
  const int64_t seq = p.seq_len;
  const int64_t pairs = p.num_pairs;
  const int64_t context = seq - 3 * p.num_queries;
  const int64_t slot = context / pairs;  // >= 3 by validate_recall_params
  // Draw index of use k of a stream in this row; k < S for every use below.
  const uint64_t base = static_cast<uint64_t>(row) * static_cast<uint64_t>(seq);

  // The whole row is built (O(S) integer work, negligible beside the model) and then sliced.
  std::vector<int32_t> tokens(static_cast<size_t>(seq));
  std::vector<int32_t> scored(static_cast<size_t>(seq), 0);
  for (int64_t c = 0; c < context; ++c) {
    tokens[c] =
        static_cast<int32_t>(p.filler.begin + draw(seed_, kFiller, base + c, p.filler.size()));
  }
  // P distinct keys (Floyd's algorithm: one draw per key, no rejection).
  const int64_t num_keys = p.keys.size();
  std::vector<char> taken(static_cast<size_t>(num_keys), 0);
  std::vector<int32_t> keys;
  keys.reserve(static_cast<size_t>(pairs));
  for (int64_t j = num_keys - pairs; j < num_keys; ++j) {
    int64_t pick = draw(seed_, kKeys, base + (j - (num_keys - pairs)), j + 1);
    if (taken[pick]) pick = j;
    taken[pick] = 1;
    keys.push_back(static_cast<int32_t>(p.keys.begin + pick));
  }
  std::vector<int32_t> values(static_cast<size_t>(pairs));
  for (int64_t j = 0; j < pairs; ++j) {
    values[j] =
        static_cast<int32_t>(p.values.begin + draw(seed_, kValues, base + j, p.values.size()));
    const int64_t at = j * slot + draw(seed_, kOffsets, base + j, slot - 2);
    tokens[at] = p.pair_marker;
    tokens[at + 1] = keys[j];
    tokens[at + 2] = values[j];
  }
  // Which pairs are asked, in which order: a partial Fisher-Yates shuffle.
  std::vector<int64_t> order(static_cast<size_t>(pairs));
  std::iota(order.begin(), order.end(), 0);
  for (int64_t q = 0; q < p.num_queries; ++q) {
    std::swap(order[q], order[q + draw(seed_, kOrder, base + q, pairs - q)]);
    const int64_t at = context + 3 * q;
    tokens[at] = p.query_marker;
    tokens[at + 1] = keys[order[q]];
    tokens[at + 2] = values[order[q]];
    scored[at + 1] = 1;
  }

  size_t out_at = 0;
  for (const TokenRange& range : ranges) {
    for (int64_t c = range.begin; c < range.end; ++c, ++out_at) {
      out.tokens[out_at] = tokens[c];
      out.targets[out_at] = c + 1 < seq ? tokens[c + 1] : 0;
      out.positions[out_at] = static_cast<int32_t>(c);
      out.segment_ids[out_at] = 1;
      out.target_segment_ids[out_at] = scored[c];
    }
  }
}

ScoredAccuracy scored_accuracy(std::span<const int32_t> predictions, const Batch& batch) {
  MAXCTX_CHECK_EQ(static_cast<int64_t>(predictions.size()), batch.size(),
                  "predictions are (rows, seq_len)");
  ScoredAccuracy accuracy;
  for (int64_t i = 0; i < batch.size(); ++i) {
    if (batch.target_segment_ids[i] == 0) continue;
    ++accuracy.scored;
    if (predictions[i] == batch.targets[i]) ++accuracy.correct;
  }
  return accuracy;
}

ScoredAccuracy scored_accuracy_from_logits(std::span<const float> logits, int64_t vocab_size,
                                           const Batch& batch) {
  MAXCTX_CHECK_EQ(static_cast<int64_t>(logits.size()), batch.size() * vocab_size,
                  "logits are (rows, seq_len, vocab_size)");
  std::vector<int32_t> predictions(static_cast<size_t>(batch.size()));
  for (int64_t i = 0; i < batch.size(); ++i) {
    const float* row = logits.data() + i * vocab_size;
    predictions[i] = static_cast<int32_t>(first_arg_max(std::span(row, vocab_size)));
  }
  return scored_accuracy(predictions, batch);
}

}  // namespace maxctx

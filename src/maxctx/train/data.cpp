#include "maxctx/train/data.h"

#include <fmt/format.h>

#include <utility>

#include "maxctx/config/config.h"
#include "maxctx/core/check.h"
#include "maxctx/core/rng.h"
#include "maxctx/train/data_tokens.h"
#include "maxctx/train/recall.h"

namespace maxctx {

DataSource::DataSource(int64_t seq_len) : seq_len_(seq_len) {
  if (seq_len < 1) fail("max_target_length = {} must be >= 1", seq_len);
}

Batch DataSource::read(int64_t row_begin, int64_t rows, int64_t cp, int64_t cp_rank,
                       bool load_balance) const {
  MAXCTX_CHECK(row_begin >= 0 && rows >= 0, "rows [{}, +{}) must be non-negative", row_begin, rows);
  const std::vector<TokenRange> ranges = context_shard_ranges(seq_len_, cp, cp_rank, load_balance);
  const int64_t local = context_shard_len(seq_len_, cp);
  Batch batch(rows, local);
  for (int64_t r = 0; r < rows; ++r) {
    const auto row_of = [&](std::vector<int32_t>& array) {
      return std::span<int32_t>(array).subspan(static_cast<size_t>(r * local),
                                               static_cast<size_t>(local));
    };
    fill_row(row_begin + r, ranges,
             {row_of(batch.tokens), row_of(batch.targets), row_of(batch.positions),
              row_of(batch.segment_ids), row_of(batch.target_segment_ids)});
  }
  return batch;
}

SyntheticSource::SyntheticSource(int64_t vocab_size, int64_t seq_len, uint64_t seed)
    : DataSource(seq_len), vocab_size_(vocab_size), seed_(seed) {
  if (vocab_size < 1 || vocab_size > INT32_MAX) {
    fail("vocab_size = {} must be in [1, 2^31) for synthetic data", vocab_size);
  }
}

std::string SyntheticSource::describe() const {
  return fmt::format("synthetic: random tokens in [0, {}), rows of {}, seed {}", vocab_size_,
                     seq_len(), seed_);
}

void SyntheticSource::fill_row(int64_t row, std::span<const TokenRange> ranges,
                               RowSlices out) const {
  static const uint64_t stream = rng::stream_id("data.synthetic");
  const uint64_t row_first = static_cast<uint64_t>(row) * static_cast<uint64_t>(seq_len() + 1);
  const auto bound = static_cast<uint32_t>(vocab_size_);
  size_t at = 0;
  for (const TokenRange& range : ranges) {
    const auto n = static_cast<size_t>(range.size());
    const uint64_t first = row_first + static_cast<uint64_t>(range.begin);
    rng::fill_uniform_int(out.tokens.subspan(at, n), seed_, stream, first, bound);
    rng::fill_uniform_int(out.targets.subspan(at, n), seed_, stream, first + 1, bound);
    for (size_t i = 0; i < n; ++i) {
      out.positions[at + i] = static_cast<int32_t>(range.begin + static_cast<int64_t>(i));
      out.segment_ids[at + i] = 1;
      out.target_segment_ids[at + i] = 1;
    }
    at += n;
  }
}

int64_t shuffled_index(int64_t index, int64_t n, uint64_t seed, uint64_t epoch) {
  MAXCTX_CHECK(n >= 1 && index >= 0 && index < n, "index {} outside [0, {})", index, n);
  if (n == 1) return 0;
  int half_bits = 1;
  while ((uint64_t{1} << (2 * half_bits)) < static_cast<uint64_t>(n)) ++half_bits;
  const uint64_t mask = (uint64_t{1} << half_bits) - 1;
  static const uint64_t stream = rng::stream_id("data.shuffle");
  constexpr int kRounds = 6;
  uint64_t x = static_cast<uint64_t>(index);
  // Cycle walking: the Feistel network permutes [0, 4^half_bits) < 4n, so walking from an
  // in-range value back into range takes fewer than 4 steps on average and stays a bijection.
  do {
    uint64_t left = x >> half_bits;
    uint64_t right = x & mask;
    for (int round = 0; round < kRounds; ++round) {
      const uint64_t f =
          rng::philox4x32(seed, stream ^ (epoch * kRounds + static_cast<uint64_t>(round)),
                          right)[0] &
          mask;
      const uint64_t next_right = left ^ f;
      left = right;
      right = next_right;
    }
    x = (left << half_bits) | right;
  } while (x >= static_cast<uint64_t>(n));
  return static_cast<int64_t>(x);
}

int64_t row_in_epoch(int64_t row, int64_t rows_per_epoch, bool shuffle, uint64_t seed) {
  const int64_t epoch = row / rows_per_epoch;
  const int64_t in_epoch = row % rows_per_epoch;
  return shuffle ? shuffled_index(in_epoch, rows_per_epoch, seed, static_cast<uint64_t>(epoch))
                 : in_epoch;
}

DataLoader::DataLoader(std::shared_ptr<const DataSource> source, const DataShard& shard,
                       int64_t position)
    : source_(std::move(source)), shard_(shard), position_(0) {
  MAXCTX_CHECK(source_ != nullptr, "a loader needs a source");
  if (shard.global_batch_rows < 1 || shard.data_shards < 1 ||
      shard.global_batch_rows % shard.data_shards != 0) {
    fail(
        "the global batch of {} rows does not split evenly over {} data shards (data x fsdp); "
        "pick per_device_batch_size so that the global batch is a multiple of {}",
        shard.global_batch_rows, shard.data_shards, shard.data_shards);
  }
  MAXCTX_CHECK(shard.data_rank >= 0 && shard.data_rank < shard.data_shards,
               "data rank {} outside [0, {})", shard.data_rank, shard.data_shards);
  check_context_split(source_->seq_len(), shard.cp, shard.load_balance);
  check_context_rank(shard.cp, shard.cp_rank);
  seek(position);
}

void DataLoader::seek(int64_t position) {
  MAXCTX_CHECK_GE(position, int64_t{0}, "the data position counts rows consumed");
  position_ = position;
}

Batch DataLoader::next() {
  const int64_t rows = rows_per_shard();
  Batch batch = source_->read(position_ + shard_.data_rank * rows, rows, shard_.cp, shard_.cp_rank,
                              shard_.load_balance);
  position_ += shard_.global_batch_rows;
  return batch;
}

std::shared_ptr<const DataSource> make_data_source(const Config& config) {
  const uint64_t seed = static_cast<uint64_t>(config.data_shuffle_seed);
  switch (dataset_type(config)) {
    case DatasetType::kSynthetic:
      return std::make_shared<SyntheticSource>(config.vocab_size, config.max_target_length, seed);
    case DatasetType::kTokens: {
      TokenDataOptions options;
      options.path = config.dataset_path;
      options.vocab_size = config.vocab_size;
      options.seq_len = config.max_target_length;
      options.packing = config.packing;
      options.eos_id = config.eos_id;
      options.seed = seed;
      options.shuffle = config.enable_data_shuffling;
      return std::make_shared<TokenFileSource>(options);
    }
    case DatasetType::kRecall:
      return std::make_shared<RecallSource>(recall_params_from(config), seed);
    case DatasetType::kHf:
      fail("dataset_type=hf is tokenized by the trainer (train/text_data.h: open_text_source)");
  }
  fail("dataset_type = '{}' is not one of synthetic|tokens|recall|hf", config.dataset_type);
}

}  // namespace maxctx

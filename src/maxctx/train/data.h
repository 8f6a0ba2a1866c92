// Training data: sources that are random-access by global row, and the loader that walks them.
//
// Every source is a pure function of (its settings, global row index): row g is the same bytes
// on every rank, in every run, whatever was read before. So each rank reads only its own rows
// (its data shard) and only its own columns (its context shard, the dual chunk swap), and a
// resumed run continues exactly from the data position = global rows consumed so far
// (step × global batch × gradient_accumulation_steps). Rows never run out: past the end of a
// file the source wraps into the next epoch.
// Invariant: source.read(g, n, cp, r, lb) == shard_batch_for_context(source.read(g, n), cp, r,
// lb) for every source (tested).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "maxctx/parallel/load_balance.h"
#include "maxctx/train/batch.h"

namespace maxctx {

struct Config;

// Where a source writes one row's requested columns: five arrays of the same length.
struct RowSlices {
  std::span<int32_t> tokens, targets, positions, segment_ids, target_segment_ids;
};

class DataSource {
 public:
  virtual ~DataSource() = default;

  int64_t seq_len() const { return seq_len_; }

  // Global rows [row_begin, row_begin + rows) as this context rank's [rows, S/cp] shard
  // (cp = 1: full rows). maxctx::Error when S does not split over cp.
  Batch read(int64_t row_begin, int64_t rows, int64_t cp = 1, int64_t cp_rank = 0,
             bool load_balance = true) const;

  // One line for the log: kind, path, sizes.
  virtual std::string describe() const = 0;

 protected:
  explicit DataSource(int64_t seq_len);
  // Writes the columns `ranges` of global row `row` (concatenated, in that order) into `out`.
  virtual void fill_row(int64_t row, std::span<const TokenRange> ranges, RowSlices out) const = 0;

 private:
  int64_t seq_len_;
};

// MaxText's synthetic throughput data, with random tokens: token (g, c) is uniform in [0, vocab)
// from the counter-based RNG keyed by (seed, g·(S+1) + c), for c in [0, S]; targets are the next
// token (column S is drawn only as the last target); one segment; positions 0..S-1; all scored.
class SyntheticSource final : public DataSource {
 public:
  SyntheticSource(int64_t vocab_size, int64_t seq_len, uint64_t seed);
  std::string describe() const override;

 private:
  void fill_row(int64_t row, std::span<const TokenRange> ranges, RowSlices out) const override;
  int64_t vocab_size_;
  uint64_t seed_;
};

// A random-access bijection of [0, n) keyed by (seed, epoch): a Feistel network over the
// smallest even-bit power of two >= n, cycle-walked back into range. The row order of an epoch.
int64_t shuffled_index(int64_t index, int64_t n, uint64_t seed, uint64_t epoch);
// The row of an epoch of `rows_per_epoch` rows that global row `row` reads: epochs repeat, each
// in shuffled_index order (keyed by the epoch) when `shuffle`, else in order.
int64_t row_in_epoch(int64_t row, int64_t rows_per_epoch, bool shuffle, uint64_t seed);

// What one rank reads of every global batch. The batch's rows are split into data_shards equal
// blocks (the data x fsdp axes; the context axis shares rows and splits columns instead).
struct DataShard {
  int64_t global_batch_rows = 1;  // rows per micro-batch over the whole job
  int64_t data_shards = 1;
  int64_t data_rank = 0;
  int64_t cp = 1;
  int64_t cp_rank = 0;
  bool load_balance = true;
};

// Walks a source one global batch at a time. position() is the data position to checkpoint;
// a loader constructed (or seek()ed) there continues with exactly the batches a run that never
// stopped would have read.
class DataLoader {
 public:
  DataLoader(std::shared_ptr<const DataSource> source, const DataShard& shard,
             int64_t position = 0);

  // This rank's [global_batch_rows / data_shards, S/cp] share of the next global batch.
  Batch next();
  int64_t position() const { return position_; }
  void seek(int64_t position);
  int64_t rows_per_shard() const { return shard_.global_batch_rows / shard_.data_shards; }
  const DataSource& source() const { return *source_; }

 private:
  std::shared_ptr<const DataSource> source_;
  DataShard shard_;
  int64_t position_;
};

// dataset_type synthetic | tokens | recall, from vocab_size, max_target_length, dataset_path,
// packing, eos_id and data_shuffle_seed. Token files are shuffled per epoch.
std::shared_ptr<const DataSource> make_data_source(const Config& config);

}  // namespace maxctx

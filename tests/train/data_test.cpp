// Data sources and the loader: synthetic determinism and random access, the row shuffle, a
// rank's shard read directly equal to slicing full rows (every source, cp, rank, balancing),
// data shards and exact resumption from a data position.
#include "maxctx/train/data.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "maxctx/config/config.h"
#include "maxctx/core/check.h"
#include "maxctx/train/data_tokens.h"
#include "maxctx/train/recall.h"
#include "maxctx/train/token_file.h"

namespace maxctx {
namespace {

std::string temp_path(const std::string& name) {
  return testing::TempDir() + "maxctx_data_test_" + std::to_string(::getpid()) + "_" + name;
}

// Row r of a batch as a Batch of one row.
Batch row_of(const Batch& batch, int64_t r) {
  Batch one(1, batch.seq_len);
  const auto copy = [&](const std::vector<int32_t>& from, std::vector<int32_t>& to) {
    std::copy_n(from.begin() + r * batch.seq_len, batch.seq_len, to.begin());
  };
  copy(batch.tokens, one.tokens);
  copy(batch.targets, one.targets);
  copy(batch.positions, one.positions);
  copy(batch.segment_ids, one.segment_ids);
  copy(batch.target_segment_ids, one.target_segment_ids);
  return one;
}

TEST(SyntheticSource, DeterministicRandomAccessRows) {
  const SyntheticSource source(1000, 16, 7);
  const Batch all = source.read(0, 10);
  ASSERT_EQ(all.rows, 10);
  ASSERT_EQ(all.seq_len, 16);
  EXPECT_EQ(SyntheticSource(1000, 16, 7).read(0, 10), all);  // another instance, same bytes
  // Rows read alone, out of order, equal the same rows read in one batch.
  for (int64_t r : {9, 3, 0, 5}) EXPECT_EQ(source.read(r, 1), row_of(all, r)) << r;
  EXPECT_NE(SyntheticSource(1000, 16, 8).read(0, 10).tokens, all.tokens);

  std::set<int32_t> distinct;
  for (int64_t r = 0; r < all.rows; ++r) {
    for (int64_t c = 0; c < all.seq_len; ++c) {
      const int64_t i = r * all.seq_len + c;
      ASSERT_GE(all.tokens[i], 0);
      ASSERT_LT(all.tokens[i], 1000);
      distinct.insert(all.tokens[i]);
      EXPECT_EQ(all.positions[i], c);
      EXPECT_EQ(all.segment_ids[i], 1);
      EXPECT_EQ(all.target_segment_ids[i], 1);
      if (c + 1 < all.seq_len) {
        EXPECT_EQ(all.targets[i], all.tokens[i + 1]);
      }
    }
  }
  EXPECT_GT(distinct.size(), 120u);  // 160 draws from 1000: random, not constant
  EXPECT_EQ(total_weights(all), 160);
}

TEST(Shuffle, IsABijectionPerEpoch) {
  for (int64_t n : {1, 2, 3, 5, 17, 100, 1000}) {
    for (uint64_t epoch : {0u, 1u, 9u}) {
      std::vector<int64_t> seen(static_cast<size_t>(n), 0);
      for (int64_t i = 0; i < n; ++i) {
        const int64_t j = shuffled_index(i, n, 42, epoch);
        ASSERT_TRUE(j >= 0 && j < n) << n << " " << i << " -> " << j;
        ++seen[j];
      }
      for (int64_t j = 0; j < n; ++j) ASSERT_EQ(seen[j], 1) << "n " << n << " value " << j;
    }
  }
  int moved = 0, differs = 0;
  for (int64_t i = 0; i < 100; ++i) {
    moved += shuffled_index(i, 100, 42, 0) != i;
    differs += shuffled_index(i, 100, 42, 0) != shuffled_index(i, 100, 42, 1);
    ASSERT_EQ(shuffled_index(i, 100, 42, 3), shuffled_index(i, 100, 42, 3));
  }
  EXPECT_GT(moved, 80);
  EXPECT_GT(differs, 80);
}

// A token file of varied documents (some longer than a row) for the sources below.
std::string write_documents(const std::string& name) {
  std::vector<int32_t> tokens;
  for (int doc = 0; doc < 40; ++doc) {
    const int length = 1 + (doc * 7) % 37;
    for (int k = 0; k < length; ++k) tokens.push_back(3 + (doc * 31 + k * 5) % 90);
    tokens.push_back(2);
  }
  const std::string path = temp_path(name);
  write_token_file(path, tokens, 2, TokenWidth::kUInt16);
  return path;
}

void expect_shards_equal_full_rows(const DataSource& source, int64_t row_begin, int64_t rows) {
  const Batch full = source.read(row_begin, rows);
  for (int64_t cp : {1, 2, 3, 4}) {
    for (bool balance : {true, false}) {
      for (int64_t rank = 0; rank < cp; ++rank) {
        SCOPED_TRACE(testing::Message()
                     << source.describe() << " cp " << cp << " rank " << rank << " lb " << balance);
        const Batch direct = source.read(row_begin, rows, cp, rank, balance);
        EXPECT_EQ(direct.seq_len, full.seq_len / cp);
        EXPECT_EQ(direct, shard_batch_for_context(full, cp, rank, balance));
      }
    }
  }
}

TEST(DataSources, ShardReadEqualsShardingFullRows) {
  // S = 24 and 48: 2·cp divides both for cp = 1..4.
  expect_shards_equal_full_rows(SyntheticSource(500, 24, 3), 11, 4);
  RecallParams recall = default_recall_params(64, 48);
  expect_shards_equal_full_rows(RecallSource(recall, 5), 2, 3);
  const std::string path = write_documents("shards.tok");
  for (bool packing : {true, false}) {
    TokenDataOptions options;
    options.path = path;
    options.vocab_size = 100;
    options.seq_len = 24;
    options.packing = packing;
    options.eos_id = 2;
    const TokenFileSource tokens(options);
    expect_shards_equal_full_rows(tokens, 0, tokens.rows_per_epoch() + 3);  // into epoch 2
  }
  std::remove(path.c_str());
}

TEST(DataSources, ShardOfAnUnsplittableRowIsAnError) {
  const SyntheticSource source(500, 24, 3);
  EXPECT_THROW(source.read(0, 1, 5, 0, true), Error);   // 24 % 10
  EXPECT_THROW(source.read(0, 1, 16, 0, true), Error);  // 24 % 32
  EXPECT_NO_THROW(source.read(0, 1, 6, 0, false));      // 24 % 6 == 0 without balancing
}

TEST(DataLoader, DataShardsSplitTheGlobalBatch) {
  auto source = std::make_shared<SyntheticSource>(1000, 8, 1);
  DataShard shard;
  shard.global_batch_rows = 6;
  shard.data_shards = 3;
  shard.data_rank = 2;
  DataLoader loader(source, shard);
  EXPECT_EQ(loader.rows_per_shard(), 2);
  EXPECT_EQ(loader.next(), source->read(4, 2));
  EXPECT_EQ(loader.position(), 6);
  EXPECT_EQ(loader.next(), source->read(10, 2));
  EXPECT_EQ(loader.position(), 12);

  // With a context shard the loader reads only this rank's columns.
  shard.cp = 2;
  shard.cp_rank = 1;
  DataLoader sharded(source, shard, 6);
  EXPECT_EQ(sharded.next(), source->read(10, 2, 2, 1, true));

  shard.global_batch_rows = 7;
  EXPECT_THROW(DataLoader(source, shard), Error);
}

TEST(DataLoader, ResumesExactlyFromADataPosition) {
  const std::string path = write_documents("resume.tok");
  TokenDataOptions options;
  options.path = path;
  options.vocab_size = 100;
  options.seq_len = 16;
  options.seed = 9;
  auto source = std::make_shared<TokenFileSource>(options);
  DataShard shard;
  shard.global_batch_rows = 4;
  shard.data_shards = 2;
  shard.data_rank = 1;
  shard.cp = 2;
  shard.cp_rank = 0;

  DataLoader uninterrupted(source, shard);
  std::vector<Batch> batches;
  for (int step = 0; step < 30; ++step) batches.push_back(uninterrupted.next());  // > 1 epoch

  // Stop after 11 steps, checkpoint the position, start a new loader (a new process) from it.
  DataLoader first(source, shard);
  for (int step = 0; step < 11; ++step) first.next();
  const int64_t saved = first.position();
  EXPECT_EQ(saved, 11 * 4);
  auto reopened = std::make_shared<TokenFileSource>(options);
  DataLoader resumed(reopened, shard, saved);
  for (int step = 11; step < 30; ++step) EXPECT_EQ(resumed.next(), batches[step]) << step;

  DataLoader seeker(source, shard);
  seeker.seek(25 * 4);
  EXPECT_EQ(seeker.next(), batches[25]);
  std::remove(path.c_str());
}

TEST(DataFactory, BuildsEachDatasetTypeFromTheConfig) {
  Config config;
  config.vocab_size = 64;
  config.max_target_length = 32;
  config.data_shuffle_seed = 4;
  config.dataset_type = "synthetic";
  EXPECT_EQ(make_data_source(config)->read(3, 2), SyntheticSource(64, 32, 4).read(3, 2));
  config.dataset_type = "recall";
  EXPECT_EQ(make_data_source(config)->read(3, 2),
            RecallSource(default_recall_params(64, 32), 4).read(3, 2));

  config.dataset_type = "tokens";
  config.dataset_path = write_documents("factory.tok");
  config.vocab_size = 100;
  config.eos_id = 2;
  config.packing = false;
  TokenDataOptions options;
  options.path = config.dataset_path;
  options.vocab_size = 100;
  options.seq_len = 32;
  options.packing = false;
  options.eos_id = 2;
  options.seed = 4;
  EXPECT_EQ(make_data_source(config)->read(0, 5), TokenFileSource(options).read(0, 5));
  config.eos_id = 3;
  EXPECT_THROW(make_data_source(config), Error);
  std::remove(config.dataset_path.c_str());

  config.dataset_type = "text";
  EXPECT_THROW(make_data_source(config), Error);
}

}  // namespace
}  // namespace maxctx

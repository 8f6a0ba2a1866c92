// Dense MoE dispatch with capacity dropping when a sequence is split over context ranks
// (model/moe_dropping.h), simulated in one process: each simulated rank routes its tokens (the
// dual chunk swap of parallel/load_balance.h, or contiguous blocks), counts its chunks, and
// reads every chunk's counts as ContextSequenceChunks would gather them. Exactly the (token,
// choice) pairs the one-rank dense_dispatch drops are dropped, for cp 2, 3 and 4, with and
// without load balancing; each kept pair has its own row in its expert's block. The MPI run of
// the same (a whole training step against one rank) is moe_train_test.
#include "maxctx/model/moe_dropping.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <vector>

#include "maxctx/core/rng.h"
#include "maxctx/model/moe_block.h"
#include "maxctx/parallel/load_balance.h"
#include "maxctx/parallel/sequence_chunks.h"

namespace maxctx::model {
namespace {

// K distinct experts per token, drawn at random (a skewed draw, so that some experts overflow).
MoeRouting random_routing(int64_t N, int64_t X, int64_t K, uint64_t seed) {
  uint64_t draw = 0;
  const auto uniform = [&] { return rng::uniform_at(seed, 0, draw++); };  // in [0, 1)
  MoeRouting r;
  for (int64_t t = 0; t < N; ++t) {
    std::vector<int32_t> experts(static_cast<size_t>(X));
    std::iota(experts.begin(), experts.end(), 0);
    for (int64_t i = 0; i < K; ++i) {
      // Lower experts are likelier: pick among the first half twice as often.
      const int64_t left = X - i;
      int64_t pick = static_cast<int64_t>(uniform() * static_cast<float>(left));
      if (uniform() < 0.5f) pick /= 2;
      pick = std::min(pick, left - 1);
      std::swap(experts[static_cast<size_t>(i)], experts[static_cast<size_t>(i + pick)]);
      r.top_index.push_back(experts[static_cast<size_t>(i)]);
      r.top_weight.push_back(1.0f / static_cast<float>(K));
    }
  }
  return r;
}

TEST(MoeDropping, ChunksAreTheLoadBalanceRanges) {
  for (int64_t cp : {1, 2, 3, 4}) {
    for (bool balance : {true, false}) {
      const int64_t S = 24;
      const int64_t chunks = parallel::context_chunk_count(cp, balance);
      for (int64_t r = 0; r < cp; ++r) {
        const std::vector<TokenRange> ranges = context_shard_ranges(S, cp, r, balance);
        const std::vector<int64_t> mine = parallel::context_chunks_of(cp, r, balance);
        ASSERT_EQ(ranges.size(), mine.size());
        for (size_t i = 0; i < mine.size(); ++i) {
          EXPECT_EQ(ranges[i].begin, mine[i] * (S / chunks)) << cp << " " << balance << " " << r;
          EXPECT_EQ(ranges[i].size(), S / chunks);
        }
      }
    }
  }
}

TEST(MoeDropping, SlotsAreTheRowsCapacityAtMostTheRanksTokens) {
  // S = 48, K 2, X 4, cf 0.5: capacity int(ceil(96/4)·0.5) = 12.
  EXPECT_EQ(dense_slots(48, 1, 4, 2, 0.5), 12);
  EXPECT_EQ(dense_slots(24, 2, 4, 2, 0.5), 12);
  EXPECT_EQ(dense_slots(6, 8, 4, 2, 0.5), 6);     // 6 tokens here: at most 6 per expert
  EXPECT_EQ(dense_slots(24, 2, 4, 2, -1.0), 24);  // no dropping: every local token
  EXPECT_EQ(dense_slots(12, 1, 4, 2, 3.0), 18);   // one rank: capacity even above S
}

TEST(MoeDropping, ContextRanksDropWhatOneRankDrops) {
  const int64_t batch = 2, S = 24, X = 4, K = 2;
  const double cf = 0.5;  // capacity 6 of the row's 48 choices: about half drop
  const int64_t capacity = expert_capacity(S, X, K, cf);
  const MoeRouting full = random_routing(batch * S, X, K, 7);
  MoeDispatch one;
  dense_dispatch(full, batch, S, X, K, capacity, one);
  const int64_t dropped_alone = dropped_choices(one);
  ASSERT_GT(dropped_alone, 0);
  for (int64_t cp : {2, 3, 4}) {
    for (bool balance : {true, false}) {
      SCOPED_TRACE("cp " + std::to_string(cp) + (balance ? " balanced" : " contiguous"));
      const int64_t seq = S / cp;
      const int64_t chunks = parallel::context_chunk_count(cp, balance);
      // Each rank's tokens and their routing, and what the all-gather would give every rank.
      std::vector<MoeRouting> local(static_cast<size_t>(cp));
      std::vector<int64_t> all(static_cast<size_t>(batch * chunks * X));
      for (int64_t r = 0; r < cp; ++r) {
        const std::vector<int64_t> tokens = context_shard_indices(S, cp, r, balance);
        MoeRouting& mine = local[static_cast<size_t>(r)];
        for (int64_t b = 0; b < batch; ++b) {
          for (int64_t s : tokens) {
            for (int64_t j = 0; j < K; ++j) {
              mine.top_index.push_back(full.top_index[(b * S + s) * K + j]);
              mine.top_weight.push_back(full.top_weight[(b * S + s) * K + j]);
            }
          }
        }
        const std::vector<int64_t> ids = parallel::context_chunks_of(cp, r, balance);
        const int64_t held = static_cast<int64_t>(ids.size());
        std::vector<int64_t> counts(static_cast<size_t>(batch * held * X));
        chunk_choice_counts(mine, batch, seq, held, X, K, counts);
        for (int64_t b = 0; b < batch; ++b) {
          for (int64_t i = 0; i < held; ++i) {
            std::copy_n(counts.begin() + (b * held + i) * X, X,
                        all.begin() + (b * chunks + ids[static_cast<size_t>(i)]) * X);
          }
        }
      }
      int64_t dropped = 0;
      for (int64_t r = 0; r < cp; ++r) {
        const std::vector<int64_t> tokens = context_shard_indices(S, cp, r, balance);
        const std::vector<int64_t> ids = parallel::context_chunks_of(cp, r, balance);
        const int64_t held = static_cast<int64_t>(ids.size());
        std::vector<int64_t> offsets(static_cast<size_t>(batch * held * X));
        chunk_offsets(all, batch, chunks, ids, X, offsets);
        const int64_t slots = dense_slots(seq, cp, X, K, cf);
        MoeDispatch d;
        dense_dispatch_chunks(local[static_cast<size_t>(r)], batch, seq, X, K, capacity, slots,
                              held, offsets, d);
        ASSERT_EQ(d.rows(), X * batch * slots);
        dropped += dropped_choices(d);
        for (int64_t b = 0; b < batch; ++b) {
          for (int64_t s = 0; s < seq; ++s) {
            const int64_t t = b * seq + s;
            for (int64_t j = 0; j < K; ++j) {
              const int64_t original = (b * S + tokens[static_cast<size_t>(s)]) * K + j;
              const int64_t row = d.choice_row[t * K + j];
              EXPECT_EQ(row >= 0, one.choice_row[original] >= 0)
                  << "rank " << r << " row " << b << " token " << tokens[s] << " choice " << j;
              if (row < 0) continue;
              EXPECT_EQ(d.row_token[row], t);
              const int64_t x = local[static_cast<size_t>(r)].top_index[t * K + j];
              EXPECT_GE(row, d.expert_begin[x]);
              EXPECT_LT(row, d.expert_begin[x + 1]);
              EXPECT_EQ((row - d.expert_begin[x]) / slots, b);  // the row's own slots
            }
          }
        }
      }
      EXPECT_EQ(dropped, dropped_alone);
    }
  }
}

// One chunk counted from zero with slots = capacity is the one-rank plan, row for row.
TEST(MoeDropping, OneChunkIsTheOneRankPlan) {
  const int64_t batch = 3, S = 16, X = 4, K = 2;
  const MoeRouting routing = random_routing(batch * S, X, K, 11);
  for (int64_t capacity : {1, 3, 8, 16}) {
    MoeDispatch one, chunked;
    dense_dispatch(routing, batch, S, X, K, capacity, one);
    const std::vector<int64_t> zeros(static_cast<size_t>(batch * X), 0);
    dense_dispatch_chunks(routing, batch, S, X, K, capacity, capacity, 1, zeros, chunked);
    EXPECT_EQ(chunked.choice_row, one.choice_row);
    EXPECT_EQ(chunked.row_token, one.row_token);
    EXPECT_EQ(chunked.expert_begin, one.expert_begin);
  }
}

}  // namespace
}  // namespace maxctx::model

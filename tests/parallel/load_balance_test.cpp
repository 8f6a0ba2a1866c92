// The dual chunk swap: the issue's example, exact partitions for every cp, equal causal work
// with balancing (unequal without), inverse ∘ forward = identity, and the errors.
#include "maxctx/parallel/load_balance.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <vector>

namespace maxctx {
namespace {

using Indices = std::vector<int64_t>;

TEST(LoadBalance, IssueExampleCp2S8) {
  EXPECT_EQ(context_shard_indices(8, 2, 0, true), (Indices{0, 1, 6, 7}));
  EXPECT_EQ(context_shard_indices(8, 2, 1, true), (Indices{2, 3, 4, 5}));
  EXPECT_EQ(context_permutation(8, 2, true), (Indices{0, 1, 6, 7, 2, 3, 4, 5}));
  EXPECT_EQ(context_shard_ranges(8, 2, 0, true), (std::vector<TokenRange>{{0, 2}, {6, 8}}));
  // Balancing off: contiguous halves.
  EXPECT_EQ(context_shard_indices(8, 2, 0, false), (Indices{0, 1, 2, 3}));
  EXPECT_EQ(context_shard_indices(8, 2, 1, false), (Indices{4, 5, 6, 7}));
  EXPECT_EQ(context_permutation(8, 2, false), (Indices{0, 1, 2, 3, 4, 5, 6, 7}));
}

TEST(LoadBalance, OddCp) {
  // cp = 3, S = 12: six chunks of 2; rank r holds chunks r and 5 - r.
  EXPECT_EQ(context_permutation(12, 3, true), (Indices{0, 1, 10, 11, 2, 3, 8, 9, 4, 5, 6, 7}));
}

TEST(LoadBalance, EveryCpPartitionsTheSequence) {
  for (int64_t cp = 1; cp <= 8; ++cp) {
    for (int64_t multiple : {1, 2, 3, 7, 16}) {
      for (bool balance : {true, false}) {
        const int64_t seq = 2 * cp * multiple;
        SCOPED_TRACE(testing::Message() << "cp " << cp << " S " << seq << " lb " << balance);
        Indices all;
        for (int64_t rank = 0; rank < cp; ++rank) {
          const Indices mine = context_shard_indices(seq, cp, rank, balance);
          ASSERT_EQ(static_cast<int64_t>(mine.size()), context_shard_len(seq, cp));
          all.insert(all.end(), mine.begin(), mine.end());
        }
        EXPECT_EQ(all, context_permutation(seq, cp, balance));
        Indices sorted = all;
        std::sort(sorted.begin(), sorted.end());
        Indices expected(static_cast<size_t>(seq));
        std::iota(expected.begin(), expected.end(), 0);
        EXPECT_EQ(sorted, expected);

        const Indices inverse = inverse_permutation(all);
        for (int64_t j = 0; j < seq; ++j) ASSERT_EQ(inverse[all[j]], j);
        // Permute then un-permute a sequence: the identity.
        Indices permuted(static_cast<size_t>(seq)), restored(static_cast<size_t>(seq));
        for (int64_t j = 0; j < seq; ++j) permuted[j] = 1000 + all[j];
        for (int64_t i = 0; i < seq; ++i) restored[i] = permuted[inverse[i]];
        for (int64_t i = 0; i < seq; ++i) ASSERT_EQ(restored[i], 1000 + i);
      }
    }
  }
}

int64_t causal_work(const Indices& positions) {
  int64_t work = 0;
  for (int64_t pos : positions) work += pos + 1;
  return work;
}

TEST(LoadBalance, CausalWorkIsEqualOnlyWithBalancing) {
  // The research note's figures for S = 1024, cp = 4.
  for (int64_t rank = 0; rank < 4; ++rank) {
    EXPECT_EQ(causal_work(context_shard_indices(1024, 4, rank, true)), 131200) << rank;
  }
  EXPECT_EQ(causal_work(context_shard_indices(1024, 4, 0, false)), 32896);
  EXPECT_EQ(causal_work(context_shard_indices(1024, 4, 3, false)), 229504);

  for (int64_t cp = 2; cp <= 8; ++cp) {
    const int64_t seq = 2 * cp * 8;
    const int64_t total = seq * (seq + 1) / 2;
    for (int64_t rank = 0; rank < cp; ++rank) {
      EXPECT_EQ(causal_work(context_shard_indices(seq, cp, rank, true)) * cp, total)
          << "cp " << cp << " rank " << rank;
    }
    EXPECT_LT(causal_work(context_shard_indices(seq, cp, 0, false)),
              causal_work(context_shard_indices(seq, cp, cp - 1, false)));
  }
}

TEST(LoadBalance, ShardRowsMovesWholeColumns) {
  // Two rows of S = 8, values row * 100 + column; cp = 2, rank 1, balanced: columns 2..5.
  std::vector<float> full(16);
  for (int row = 0; row < 2; ++row) {
    for (int c = 0; c < 8; ++c) full[row * 8 + c] = static_cast<float>(row * 100 + c);
  }
  std::vector<float> shard(8);
  shard_rows_for_context<float>(full, 2, 8, 2, 1, true, shard);
  EXPECT_EQ(shard, (std::vector<float>{2, 3, 4, 5, 102, 103, 104, 105}));
  shard_rows_for_context<float>(full, 2, 8, 2, 0, true, shard);
  EXPECT_EQ(shard, (std::vector<float>{0, 1, 6, 7, 100, 101, 106, 107}));
}

std::string error_of(int64_t seq, int64_t cp, bool balance) {
  try {
    context_permutation(seq, cp, balance);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(LoadBalance, ErrorsNameSCpAndTheDivisor) {
  const std::string balanced = error_of(12, 4, true);
  EXPECT_NE(balanced.find("S = 12"), std::string::npos) << balanced;
  EXPECT_NE(balanced.find("cp = 4"), std::string::npos) << balanced;
  EXPECT_NE(balanced.find("2*cp = 8"), std::string::npos) << balanced;
  EXPECT_NE(balanced.find("multiple of 8"), std::string::npos) << balanced;
  // Never a silent fallback: S = 12, cp = 4 is fine without balancing but not with it.
  EXPECT_EQ(error_of(12, 4, false), "");
  const std::string contiguous = error_of(10, 4, false);
  EXPECT_NE(contiguous.find("S = 10"), std::string::npos) << contiguous;
  EXPECT_NE(contiguous.find("multiple of 4"), std::string::npos) << contiguous;
  EXPECT_NE(error_of(8, 0, true), "");
  EXPECT_EQ(error_of(7, 1, true), "");  // cp = 1 is one chunk; nothing to divide
  EXPECT_THROW(context_shard_indices(8, 2, 2, true), Error);
  EXPECT_THROW(context_shard_indices(8, 2, -1, true), Error);
}

}  // namespace
}  // namespace maxctx

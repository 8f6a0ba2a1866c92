// Which tokens of a sequence each rank of the `context` axis holds: the dual chunk swap.
//
// With load balancing the sequence of S tokens is cut into 2·cp chunks of S/(2·cp) and rank r
// holds chunks r and 2·cp−1−r, in that order (cp=2, S=8: rank 0 holds 0,1,6,7; rank 1 holds
// 2,3,4,5), so every rank does the same causal attention work Σ(pos+1). Without it rank r holds
// the contiguous chunk r of S/cp. cp = 1 is one chunk either way. Works for any cp >= 1.
// Pure index arithmetic, no MPI and no batch type: the permutation is applied once when a batch
// is read (train/batch.h, train/data.h) and nothing is ever un-permuted in training.
// Invariant: the ranks' index lists, concatenated in rank order, are a permutation of 0..S-1.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "maxctx/core/check.h"

namespace maxctx {

// [begin, end) of token indices of the full sequence.
struct TokenRange {
  int64_t begin = 0;
  int64_t end = 0;
  int64_t size() const { return end - begin; }
  friend bool operator==(const TokenRange&, const TokenRange&) = default;
};

// maxctx::Error naming S, cp and what must divide S when the split is impossible (S % (2·cp)
// with balancing, S % cp without; cp >= 1), and for a rank outside [0, cp).
void check_context_split(int64_t seq_len, int64_t cp, bool load_balance);
void check_context_rank(int64_t cp, int64_t rank);

// Tokens per rank: S / cp.
int64_t context_shard_len(int64_t seq_len, int64_t cp);

// The chunks rank `rank` holds, in its local order (1 range when cp = 1 or balancing is off,
// else 2).
std::vector<TokenRange> context_shard_ranges(int64_t seq_len, int64_t cp, int64_t rank,
                                             bool load_balance);

// The same as a list of token indices, length S / cp.
std::vector<int64_t> context_shard_indices(int64_t seq_len, int64_t cp, int64_t rank,
                                           bool load_balance);

// MaxText's reorder of the whole sequence: permuted[j] = original[perm[j]], and rank r holds
// permuted positions [r·S/cp, (r+1)·S/cp). cp=2, S=8: [0,1,6,7,2,3,4,5]. Identity when
// balancing is off or cp = 1.
std::vector<int64_t> context_permutation(int64_t seq_len, int64_t cp, bool load_balance);

// inverse[perm[j]] = j, so original[i] = permuted[inverse[i]].
std::vector<int64_t> inverse_permutation(std::span<const int64_t> perm);

// Copies this rank's columns of `rows` rows of a row-major [rows, S] array into [rows, S/cp].
template <typename T>
void shard_rows_for_context(std::span<const T> full, int64_t rows, int64_t seq_len, int64_t cp,
                            int64_t rank, bool load_balance, std::span<T> shard) {
  check_context_split(seq_len, cp, load_balance);
  check_context_rank(cp, rank);
  const int64_t local = context_shard_len(seq_len, cp);
  MAXCTX_CHECK_EQ(static_cast<int64_t>(full.size()), rows * seq_len, "full is [rows, S]");
  MAXCTX_CHECK_EQ(static_cast<int64_t>(shard.size()), rows * local, "shard is [rows, S/cp]");
  const std::vector<TokenRange> ranges = context_shard_ranges(seq_len, cp, rank, load_balance);
  for (int64_t row = 0; row < rows; ++row) {
    const T* src = full.data() + row * seq_len;
    T* dst = shard.data() + row * local;
    for (const TokenRange& range : ranges) {
      for (int64_t i = range.begin; i < range.end; ++i) *dst++ = src[i];
    }
  }
}

}  // namespace maxctx

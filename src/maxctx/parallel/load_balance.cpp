#include "maxctx/parallel/load_balance.h"

namespace maxctx {

void check_context_split(int64_t seq_len, int64_t cp, bool load_balance) {
  if (cp < 1) fail("context parallelism cp = {} must be >= 1", cp);
  if (seq_len < 1) fail("sequence length S = {} must be >= 1", seq_len);
  if (cp == 1) return;
  if (load_balance && seq_len % (2 * cp) != 0) {
    fail(
        "context_parallel_load_balance needs 2*cp = {} to divide the sequence length: S = {}, "
        "cp = {}; pick S a multiple of {}, or set context_parallel_load_balance=false (then cp "
        "must divide S)",
        2 * cp, seq_len, cp, 2 * cp);
  }
  if (!load_balance && seq_len % cp != 0) {
    fail(
        "context parallelism needs cp to divide the sequence length: S = {}, cp = {}; pick S a "
        "multiple of {}",
        seq_len, cp, cp);
  }
}

void check_context_rank(int64_t cp, int64_t rank) {
  if (rank < 0 || rank >= cp) fail("context rank {} is outside [0, cp = {})", rank, cp);
}

int64_t context_shard_len(int64_t seq_len, int64_t cp) { return seq_len / cp; }

std::vector<TokenRange> context_shard_ranges(int64_t seq_len, int64_t cp, int64_t rank,
                                             bool load_balance) {
  check_context_split(seq_len, cp, load_balance);
  check_context_rank(cp, rank);
  if (cp == 1) return {{0, seq_len}};
  if (!load_balance) {
    const int64_t len = seq_len / cp;
    return {{rank * len, (rank + 1) * len}};
  }
  const int64_t chunk = seq_len / (2 * cp);
  const int64_t mirror = 2 * cp - 1 - rank;
  return {{rank * chunk, (rank + 1) * chunk}, {mirror * chunk, (mirror + 1) * chunk}};
}

std::vector<int64_t> context_shard_indices(int64_t seq_len, int64_t cp, int64_t rank,
                                           bool load_balance) {
  std::vector<int64_t> indices;
  indices.reserve(static_cast<size_t>(seq_len / cp));
  for (const TokenRange& range : context_shard_ranges(seq_len, cp, rank, load_balance)) {
    for (int64_t i = range.begin; i < range.end; ++i) indices.push_back(i);
  }
  return indices;
}

std::vector<int64_t> context_permutation(int64_t seq_len, int64_t cp, bool load_balance) {
  check_context_split(seq_len, cp, load_balance);
  std::vector<int64_t> perm;
  perm.reserve(static_cast<size_t>(seq_len));
  for (int64_t rank = 0; rank < cp; ++rank) {
    for (int64_t i : context_shard_indices(seq_len, cp, rank, load_balance)) perm.push_back(i);
  }
  return perm;
}

std::vector<int64_t> inverse_permutation(std::span<const int64_t> perm) {
  const int64_t n = static_cast<int64_t>(perm.size());
  std::vector<int64_t> inverse(perm.size(), -1);
  for (int64_t j = 0; j < n; ++j) {
    MAXCTX_CHECK(perm[j] >= 0 && perm[j] < n && inverse[perm[j]] == -1,
                 "perm[{}] = {} is not a permutation of 0..{}", j, perm[j], n - 1);
    inverse[perm[j]] = j;
  }
  return inverse;
}

}  // namespace maxctx

// How the decode step's attention cuts a long cache into key blocks on a device (flash-decoding):
// a decode step has one query row per (batch row, query head), too few to fill a GPU when each
// row walks the whole cache alone, so each row's keys are split into blocks, every block gives a
// partial out and lse over its keys, and the partials are merged in block order by the LSE merge
// of kernels/ref/attention.h's attention_merge. The blocks are disjoint and cover the cache, so
// the merge is the attention over all keys up to the fp32 rounding of another summation order.
//
// One plan for the cuda backend (kernels/cuda/attention_reference.cu) and for the host test that
// runs the same split and merge on the reference (tests/kernels/decode_split_test.cpp). Plain
// constexpr C++, so nvcc compiles it too.
#pragma once

#include <algorithm>
#include <cstdint>

namespace maxctx::kernels {

// Keys [b · block_keys, min(seq_k, (b + 1) · block_keys)) for b in [0, blocks): every block holds
// at least one key, and the last may hold fewer than the others.
struct KeySplit {
  int64_t block_keys = 1;
  int64_t blocks = 1;
};

// Query rows (one warp each) the split aims for: a few per SM on today's GPUs (132 on an H100),
// enough to hide the cache's memory latency; more only adds partials to merge.
inline constexpr int64_t kDecodeTargetRows = 2048;
// The fewest keys a block is given: below this a block's partial (head_dim floats written and
// read back by the merge) costs about what streaming its keys does.
inline constexpr int64_t kDecodeMinBlockKeys = 256;

// The split of a cache of `seq_k` keys for `query_rows` query rows: as many blocks as bring the
// rows × blocks up to kDecodeTargetRows, each of at least kDecodeMinBlockKeys keys; one block
// (no split) when the rows fill the device already or the cache is short.
constexpr KeySplit decode_key_split(int64_t seq_k, int64_t query_rows) {
  if (seq_k <= 0 || query_rows <= 0) return {std::max<int64_t>(seq_k, 1), 1};
  const int64_t wanted = (kDecodeTargetRows + query_rows - 1) / query_rows;
  const int64_t most = std::max<int64_t>(seq_k / kDecodeMinBlockKeys, 1);
  const int64_t splits = std::clamp<int64_t>(wanted, 1, most);
  const int64_t block_keys = (seq_k + splits - 1) / splits;
  return {block_keys, (seq_k + block_keys - 1) / block_keys};
}

}  // namespace maxctx::kernels

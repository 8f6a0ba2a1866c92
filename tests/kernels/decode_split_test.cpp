// Split-K decode attention (kernels/decode_split.h), the algorithm the cuda backend runs for long
// caches, here on the reference so that it is tested without a GPU: the plan's blocks cover the
// cache, and the blocks' partials (ref::attention_forward over each block's keys) merged in block
// order by ref::attention_merge equal the attention over the whole cache, with block boundaries
// that do not divide it, blocks that a sliding window or causality leaves empty (lse -inf), and a
// key of another sequence. The cuda kernels themselves are compared with the cpu backend on a
// cache long enough to split by backend_conformance_test's long-cache row (cuda: skips here).
#include "maxctx/kernels/decode_split.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "kernels/attention_layouts.h"
#include "kernels/test_util.h"
#include "maxctx/kernels/ref/attention.h"

namespace maxctx::kernels {
namespace {

using testing_util::iota;
using testing_util::ones;
using testing_util::params;
using testing_util::repeat;

TEST(DecodeSplit, BlocksCoverTheCacheAndNeverSplitAShortOrBusyOne) {
  for (const int64_t seq_k : {0, 1, 255, 511, 512, 1000, 5003, 32768, 131072}) {
    for (const int64_t rows : {1, 16, 64, 2048, 4096}) {
      const KeySplit split = decode_key_split(seq_k, rows);
      SCOPED_TRACE(testing::Message() << "seq_k " << seq_k << ", rows " << rows);
      ASSERT_GE(split.blocks, 1);
      ASSERT_GE(split.block_keys, 1);
      if (seq_k > 0) {
        EXPECT_LT(split.block_keys * (split.blocks - 1), seq_k);  // the last block holds a key
        EXPECT_GE(split.block_keys * split.blocks, seq_k);        // every key is in a block
      }
      EXPECT_LE(split.blocks, std::max<int64_t>(seq_k / kDecodeMinBlockKeys, 1));
      if (rows >= kDecodeTargetRows || seq_k < 2 * kDecodeMinBlockKeys) {
        EXPECT_EQ(split.blocks, 1);
      }
    }
  }
  // The plan of the test below: boundaries that do not divide the cache.
  const KeySplit split = decode_key_split(5003, 16);
  EXPECT_GT(split.blocks, 1);
  EXPECT_NE(5003 % split.block_keys, 0);
}

// Keys [begin, end) of every batch row of a (B, Sk, width) array.
template <typename T>
std::vector<T> key_rows(const std::vector<T>& all, int64_t B, int64_t Sk, int64_t width,
                        int64_t begin, int64_t end) {
  std::vector<T> out;
  for (int64_t b = 0; b < B; ++b) {
    out.insert(out.end(), all.begin() + (b * Sk + begin) * width,
               all.begin() + (b * Sk + end) * width);
  }
  return out;
}

void expect_split_equals_whole(const AttentionParams& p, const std::vector<int32_t>& q_pos,
                               const std::vector<int32_t>& k_seg) {
  const int64_t B = p.batch, Sk = p.seq_k, Hq = p.heads_q, D = p.head_dim;
  const int64_t kv_width = p.heads_kv * D;
  std::vector<float> q, k, v;
  for (double x : testing_util::normal_values(B * Hq * D, "q", 0, 1)) q.push_back(float(x));
  for (double x : testing_util::normal_values(B * Sk * kv_width, "k", 0, 1)) k.push_back(float(x));
  for (double x : testing_util::normal_values(B * Sk * kv_width, "v", 0, 1)) v.push_back(float(x));
  const std::vector<int32_t> q_seg = ones(B), k_pos = repeat(iota(Sk), B);

  std::vector<float> whole_out(q.size()), whole_lse(B * Hq);
  ref::attention_forward(whole_out.data(), whole_lse.data(), q.data(), k.data(), v.data(),
                         q_pos.data(), q_seg.data(), k_pos.data(), k_seg.data(), p);

  const KeySplit split = decode_key_split(Sk, B * Hq * p.seq_q);
  ASSERT_GT(split.blocks, 1);
  std::vector<float> out(q.size()), lse(B * Hq), block_out(q.size()), block_lse(B * Hq);
  int empty_blocks = 0;
  for (int64_t block = 0; block < split.blocks; ++block) {
    const int64_t begin = block * split.block_keys;
    const int64_t end = std::min(Sk, begin + split.block_keys);
    AttentionParams bp = p;
    bp.seq_k = end - begin;
    const std::vector<float> bk = key_rows(k, B, Sk, kv_width, begin, end);
    const std::vector<float> bv = key_rows(v, B, Sk, kv_width, begin, end);
    const std::vector<int32_t> b_pos = key_rows(k_pos, B, Sk, 1, begin, end);
    const std::vector<int32_t> b_seg = key_rows(k_seg, B, Sk, 1, begin, end);
    float* into_out = block == 0 ? out.data() : block_out.data();
    float* into_lse = block == 0 ? lse.data() : block_lse.data();
    ref::attention_forward(into_out, into_lse, q.data(), bk.data(), bv.data(), q_pos.data(),
                           q_seg.data(), b_pos.data(), b_seg.data(), bp);
    empty_blocks += std::isinf(into_lse[0]) ? 1 : 0;
    if (block > 0) {
      ref::attention_merge(out.data(), lse.data(), out.data(), lse.data(), block_out.data(),
                           block_lse.data(), B, p.seq_q, Hq, D);
    }
  }
  EXPECT_GT(empty_blocks, 0) << "the layout should leave a block that the first query row sees "
                                "nothing of";
  for (int64_t row = 0; row < B * Hq; ++row) {
    if (std::isinf(whole_lse[row])) {
      EXPECT_EQ(lse[row], whole_lse[row]) << "row " << row;
      continue;
    }
    EXPECT_NEAR(lse[row], whole_lse[row], 1e-5 * std::abs(whole_lse[row])) << "row " << row;
    float largest = 0;
    for (int64_t d = 0; d < D; ++d) largest = std::max(largest, std::abs(whole_out[row * D + d]));
    for (int64_t d = 0; d < D; ++d) {
      ASSERT_NEAR(out[row * D + d], whole_out[row * D + d], 1e-5 * largest)
          << "row " << row << ", element " << d;
    }
  }
}

// Batch row 0's query sees the cache up to key 3000 (the blocks after it are empty for it), row
// 1's the whole cache but key 7, which is of another sequence.
TEST(DecodeSplit, BlocksMergedInOrderEqualTheWholeCache) {
  const AttentionParams p = params(2, 1, 5003, 8, 2, 64);
  std::vector<int32_t> k_seg = ones(2 * p.seq_k);
  k_seg[p.seq_k + 7] = 2;
  expect_split_equals_whole(p, {3000, 5002}, k_seg);
}

// A sliding window of 700 keys: the blocks before it are empty for every row.
TEST(DecodeSplit, BlocksMergedInOrderEqualTheWholeCacheUnderASlidingWindow) {
  const AttentionParams p = params(2, 1, 5003, 8, 2, 64, 700);
  expect_split_equals_whole(p, {5002, 4100}, ones(2 * p.seq_k));
}

}  // namespace
}  // namespace maxctx::kernels

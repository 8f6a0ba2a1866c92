// The attention layouts the kernel tests share: causal with two batch rows and an odd head dim,
// the dual chunk swap's rank-0 queries, packed segments with rows that see no key, and a sliding
// window with GQA; head dims 40, 64, 32 and 128, so that a device backend runs both its flash
// kernels (64, 128) and its plain kernel (the others).
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "maxctx/kernels/types.h"

namespace maxctx::kernels::testing_util {

struct AttentionLayout {
  std::string name;
  AttentionParams p;
  std::vector<int32_t> q_pos, q_seg, k_pos, k_seg;  // (B, Sq), (B, Sk)
};

inline std::vector<int32_t> iota(int64_t n, int32_t from = 0) {
  std::vector<int32_t> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[i] = from + static_cast<int32_t>(i);
  return v;
}
inline std::vector<int32_t> repeat(const std::vector<int32_t>& v, int64_t times) {
  std::vector<int32_t> out;
  for (int64_t t = 0; t < times; ++t) out.insert(out.end(), v.begin(), v.end());
  return out;
}
inline std::vector<int32_t> ones(int64_t n) {
  return std::vector<int32_t>(static_cast<size_t>(n), 1);
}

inline AttentionParams params(int64_t B, int64_t Sq, int64_t Sk, int64_t Hq, int64_t Hkv, int64_t D,
                              int32_t window = 0) {
  AttentionParams p;
  p.batch = B, p.seq_q = Sq, p.seq_k = Sk, p.heads_q = Hq, p.heads_kv = Hkv, p.head_dim = D;
  p.sliding_window = window;
  return p;
}

inline std::vector<AttentionLayout> attention_layouts() {
  std::vector<AttentionLayout> layouts;
  // Causal self-attention, two batch rows, odd length and head dim (40: the device reference).
  const int64_t S = 37;
  layouts.push_back({"causal", params(2, S, S, 2, 2, 40), repeat(iota(S), 2), ones(2 * S),
                     repeat(iota(S), 2), ones(2 * S)});
  // The dual chunk swap (context = 2): rank 0's queries are chunks 0 and 3 of four (D = 64).
  const int64_t c = 12;
  std::vector<int32_t> swapped = iota(c);
  const std::vector<int32_t> last = iota(c, 3 * c);
  swapped.insert(swapped.end(), last.begin(), last.end());
  layouts.push_back({"dual_chunk_swap", params(1, 2 * c, 4 * c, 4, 1, 64), swapped, ones(2 * c),
                     iota(4 * c), ones(4 * c)});
  // Packed segments (positions restart), with query rows of a segment no key has (out 0, lse
  // −inf).
  std::vector<int32_t> pos, seg;
  for (auto [id, len] : {std::pair<int32_t, int32_t>{1, 10}, {2, 15}, {3, 6}}) {
    const std::vector<int32_t> p = iota(len);
    pos.insert(pos.end(), p.begin(), p.end());
    seg.insert(seg.end(), static_cast<size_t>(len), id);
  }
  std::vector<int32_t> k_seg = seg;
  for (int32_t& s : k_seg) s = s == 3 ? 4 : s;
  layouts.push_back({"packed_segments", params(1, 31, 31, 4, 2, 32), pos, seg, pos, k_seg});
  // Sliding window, GQA (4 query heads per kv head), D = 128.
  layouts.push_back({"sliding_window_gqa", params(1, 45, 45, 8, 2, 128, 7), iota(45), ones(45),
                     iota(45), ones(45)});
  return layouts;
}

}  // namespace maxctx::kernels::testing_util

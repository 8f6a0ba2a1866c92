// Internal to kernels/cpu: the tiling, masks and bookkeeping that the fp32 flash kernel
// (attention.cpp) and its bf16 form (attention_bf16.cpp) share. Not an API: no caller outside
// those two files.
#pragma once

#include <algorithm>
#include <cstdint>
#include <limits>
#include <vector>

#include "maxctx/core/buffer.h"
#include "maxctx/kernels/cpu/attention.h"
#include "maxctx/kernels/cpu/attention_tiles.h"
#include "maxctx/kernels/mask.h"

namespace maxctx::kernels::cpu::attention_internal {

inline constexpr float kNegInf = -std::numeric_limits<float>::infinity();

inline int64_t ceil_div(int64_t n, int64_t m) { return (n + m - 1) / m; }
inline int64_t round_up(int64_t n, int64_t m) { return ceil_div(n, m) * m; }

// A 64-byte-aligned scratch buffer of T (never empty, so data() is always a valid pointer).
template <typename T>
class Scratch {
 public:
  explicit Scratch(int64_t count)
      : bytes_(static_cast<size_t>(std::max<int64_t>(count, 1)) * sizeof(T)) {}
  T* data() { return reinterpret_cast<T*>(bytes_.data()); }
  const T* data() const { return reinterpret_cast<const T*>(bytes_.data()); }

 private:
  AlignedBuffer bytes_;
};
using FloatScratch = Scratch<float>;

// ---------------------------------------------------------------- tiles and masks

// Block ranges and tile classes: kernels/mask.h (shared with the CUDA kernels).
using kernels::BlockBounds;
using kernels::classify_tile;
using kernels::TileMask;

// bounds[b * n_blocks + blk]: the ranges of positions and segment ids in a block of rows.
inline std::vector<BlockBounds> block_bounds(const int32_t* pos, const int32_t* seg, int64_t batch,
                                             int64_t rows, int64_t block) {
  const int64_t n_blocks = ceil_div(rows, block);
  std::vector<BlockBounds> bounds(static_cast<size_t>(batch * n_blocks));
  for (int64_t b = 0; b < batch; ++b) {
    for (int64_t blk = 0; blk < n_blocks; ++blk) {
      const int64_t begin = b * rows + blk * block;
      const int64_t end = b * rows + std::min(rows, (blk + 1) * block);
      BlockBounds r = kernels::bounds_of_row(pos[begin], seg[begin]);
      for (int64_t i = begin + 1; i < end; ++i) r = kernels::bounds_add_row(r, pos[i], seg[i]);
      bounds[static_cast<size_t>(b * n_blocks + blk)] = r;
    }
  }
  return bounds;
}

// Everything a tile loop needs to know about the shapes, derived once per call.
struct Geometry {
  Geometry(const AttentionParams& p, const AttentionTiling& tiling)
      : batch(p.batch),
        seq_q(p.seq_q),
        seq_k(p.seq_k),
        heads_q(p.heads_q),
        heads_kv(p.heads_kv),
        dim(p.head_dim),
        group(p.group_size()),
        heads_per_tile(tiling.heads_per_tile),
        block_q(tiling.block_q),
        n_qb(ceil_div(p.seq_q, tiling.block_q)),
        n_kb(ceil_div(p.seq_k, kAttentionBlockK)),
        n_chunks(ceil_div(p.group_size(), tiling.heads_per_tile)),
        ld(round_up(kAttentionBlockK, kAttentionScoreAlign)),
        kv_stride(p.heads_kv * p.head_dim),
        scale(static_cast<float>(p.softmax_scale())),
        window(p.sliding_window) {}

  int64_t tokens_in_qb(int64_t qb) const { return std::min(block_q, seq_q - qb * block_q); }
  int64_t keys_in_kb(int64_t kb) const {
    return std::min(kAttentionBlockK, seq_k - kb * kAttentionBlockK);
  }
  // Columns of a score tile that row passes touch: the block's keys, padded.
  int64_t width_of_kb(int64_t kb) const { return round_up(keys_in_kb(kb), kAttentionScoreAlign); }
  int64_t heads_in_chunk(int64_t c) const {
    return std::min(heads_per_tile, group - c * heads_per_tile);
  }
  // First row of tile (qb, c) among a kv group's packed rows (Sq · group rows in all).
  int64_t tile_row(int64_t qb, int64_t c) const {
    return qb * block_q * group + c * heads_per_tile * tokens_in_qb(qb);
  }
  const float* kv_block(const float* kv, int64_t b, int64_t hk, int64_t kb) const {
    return kv + kv_block_offset(b, hk, kb);
  }
  // Element offset of key block kb of kv head hk in a (B, Sk, Hkv, D) array.
  int64_t kv_block_offset(int64_t b, int64_t hk, int64_t kb) const {
    return ((b * seq_k + kb * kAttentionBlockK) * heads_kv + hk) * dim;
  }
  // Key block kb of kv head hk, transposed (D, ld), in a buffer made by pack_transposed.
  const float* kv_block_t(const float* kv_t, int64_t b, int64_t hk, int64_t kb) const {
    return kv_t + ((b * heads_kv + hk) * n_kb + kb) * dim * ld;
  }

  int64_t batch, seq_q, seq_k, heads_q, heads_kv, dim, group;
  int64_t heads_per_tile, block_q, n_qb, n_kb, n_chunks;
  int64_t ld;         // leading dimension of score tiles: kAttentionBlockK, padded
  int64_t kv_stride;  // floats between consecutive key rows of one kv head: Hkv · D
  float scale;
  int32_t window;
};

// mask (tokens, ld): 0 where query token s of block qb sees key c of block kb, else -inf.
inline void build_mask(float* mask, const Geometry& g, int64_t b, int64_t qb, int64_t kb,
                       const int32_t* q_pos, const int32_t* q_seg, const int32_t* k_pos,
                       const int32_t* k_seg) {
  const int64_t tokens = g.tokens_in_qb(qb);
  const int64_t keys = g.keys_in_kb(kb);
  const int64_t q0 = b * g.seq_q + qb * g.block_q;
  const int64_t k0 = b * g.seq_k + kb * kAttentionBlockK;
  for (int64_t s = 0; s < tokens; ++s) {
    float* row = mask + s * g.ld;
    for (int64_t c = 0; c < keys; ++c) {
      const bool seen =
          attention_visible(q_pos[q0 + s], q_seg[q0 + s], k_pos[k0 + c], k_seg[k0 + c], g.window);
      row[c] = seen ? 0.0f : kNegInf;
    }
    for (int64_t c = keys; c < g.ld; ++c) row[c] = kNegInf;
  }
}

// score (rows, width) = q_tile · k_blockᵀ (q_tile already scaled, k_block_t transposed), masked

struct TileCounts {
  int64_t computed = 0;
  int64_t skipped = 0;
};

inline void add_stats(AttentionStats* stats, int64_t computed, int64_t skipped) {
  if (stats == nullptr) return;
  stats->blocks_computed += computed;
  stats->blocks_skipped += skipped;
}

// dq (B, Sq, Hq, D) += Σ partials (packed rows of kv group (b, hk)), in list order, for query
// blocks [qb_begin, qb_end).
inline void add_group_dq(float* dq, const std::vector<const float*>& partials, const Geometry& g,
                         int64_t b, int64_t hk, int64_t qb_begin, int64_t qb_end) {
  for (int64_t qb = qb_begin; qb < qb_end; ++qb) {
    const int64_t tokens = g.tokens_in_qb(qb);
    for (int64_t c = 0; c < g.n_chunks; ++c) {
      const int64_t row0 = g.tile_row(qb, c);
      for (int64_t jj = 0; jj < g.heads_in_chunk(c); ++jj) {
        const int64_t h = hk * g.group + c * g.heads_per_tile + jj;
        for (int64_t s = 0; s < tokens; ++s) {
          const int64_t r = row0 + jj * tokens + s;
          float* dq_row = dq + ((b * g.seq_q + qb * g.block_q + s) * g.heads_q + h) * g.dim;
          for (const float* partial : partials) {
            const float* src = partial + r * g.dim;
            for (int64_t d = 0; d < g.dim; ++d) dq_row[d] += src[d];
          }
        }
      }
    }
  }
}

}  // namespace maxctx::kernels::cpu::attention_internal

// The flash kernel with q, k, v in bf16 (kernels.h's precision contract): the fp32 kernel's
// tiles, masks and online softmax (attention_blocks.h, attention_tiles.h), its products on bf16
// inputs with fp32 sums (attention_tile_gemm_bf16: AMX, or the same bits without it).
//
// Forward: S = scale · (q · kᵀ) (the scale applied to the fp32 sum, so q is used as given), the
// online softmax in fp32, P rounded to bf16 for P · v, out normalised in fp32 and rounded once.
// Backward: d_out rounded to bf16 (delta = rowsum(d_out · out) in fp32 from the rounded d_out),
// S and dP = d_out · vᵀ recomputed with bf16 products, P and dS in fp32 and then rounded to bf16
// for dV = Pᵀ·dO, dK = scale · dSᵀ·Q, dQ = scale · dS·K, all summed in fp32 into dq, dk, dv.
// dK and dV of a key block are built transposed, (D, keys) = Qᵀ·dS and dOᵀ·P, so that every
// product's A operand is row-major bf16 read in pairs (Qᵀ and dOᵀ are packed once per group).
//
// Threads: forward as the fp32 kernel. Backward splits the key blocks of a kv group into a fixed
// number of splits (kBackwardSplits, not the thread count): dq sums each split's share in its own
// partial and adds the partials in split order, whether one thread runs a group's splits or
// several share them; so unlike the fp32 backward, the bits never depend on the thread count.
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <type_traits>
#include <vector>

#include "maxctx/core/buffer.h"
#include "maxctx/core/check.h"
#include "maxctx/kernels/cpu/attention.h"
#include "maxctx/kernels/cpu/attention_blocks.h"
#include "maxctx/kernels/cpu/attention_tiles.h"

namespace maxctx::kernels::cpu {
namespace {

using namespace attention_internal;  // NOLINT(google-build-using-namespace)

constexpr int64_t kBackwardSplits = 8;  // dq partials per kv group in the backward

inline float widen(float x) { return x; }
inline float widen(bf16 x) { return bf16_to_float(x); }
inline void store(float& dst, float x) { dst = x; }
inline void store(bf16& dst, float x) { dst = float_to_bf16(x); }

void check_even_head_dim(const AttentionParams& p) {
  MAXCTX_CHECK(
      p.head_dim % 2 == 0,
      "bf16 attention multiplies pairs of bf16 along the head dim: head_dim {} must be even",
      p.head_dim);
}

// Words of one packed key block (kv_packed below).
int64_t packed_block_words(const Geometry& g) {
  return attention_bf16_packed_words(g.dim, kAttentionBlockK);
}

// kv_packed (B, Hkv, n_kb) blocks of packed_block_words: B = kv_blockᵀ (D, keys) for every key
// block, the B operand of S = Q·Kᵀ (kv = k) and dP = dO·Vᵀ (kv = v).
void pack_key_blocks(uint32_t* kv_packed, const bf16* kv, const Geometry& g) {
  const int64_t n_blocks = g.batch * g.heads_kv * g.n_kb;
#pragma omp parallel for schedule(static)
  for (int64_t blk = 0; blk < n_blocks; ++blk) {
    const int64_t kb = blk % g.n_kb;
    const int64_t hk = (blk / g.n_kb) % g.heads_kv;
    const int64_t b = blk / (g.n_kb * g.heads_kv);
    attention_pack_bf16_transposed(kv_packed + blk * packed_block_words(g),
                                   kv + g.kv_block_offset(b, hk, kb), g.keys_in_kb(kb), g.dim,
                                   g.kv_stride);
  }
}

const uint32_t* packed_block(const uint32_t* kv_packed, const Geometry& g, int64_t b, int64_t hk,
                             int64_t kb) {
  return kv_packed + ((b * g.heads_kv + hk) * g.n_kb + kb) * packed_block_words(g);
}

// Query-shaped rows (B, Sq, Hq, D) of tile (qb, c) of kv group (b, hk) into packed
// (heads_in_chunk · tokens, D) bf16 order, rounding when src is f32.
template <typename T>
void pack_tile_bf16(bf16* dst, const T* src, const Geometry& g, int64_t b, int64_t hk, int64_t qb,
                    int64_t c) {
  const int64_t tokens = g.tokens_in_qb(qb);
  for (int64_t jj = 0; jj < g.heads_in_chunk(c); ++jj) {
    const int64_t h = hk * g.group + c * g.heads_per_tile + jj;
    for (int64_t s = 0; s < tokens; ++s) {
      const T* row = src + ((b * g.seq_q + qb * g.block_q + s) * g.heads_q + h) * g.dim;
      bf16* packed = dst + (jj * tokens + s) * g.dim;
      if constexpr (std::is_same_v<T, bf16>) {
        std::copy(row, row + g.dim, packed);
      } else {
        attention_round_to_bf16(packed, row, g.dim);
      }
    }
  }
}

// dst (rows, ld) bf16 = src (rows, ld) rounded, the first width columns of each row.
void round_rows(bf16* dst, const float* src, int64_t rows, int64_t width, int64_t ld) {
  for (int64_t r = 0; r < rows; ++r) attention_round_to_bf16(dst + r * ld, src + r * ld, width);
}

// ---------------------------------------------------------------- forward

struct ForwardScratch {
  explicit ForwardScratch(const Geometry& g)
      : q_tile(kAttentionTileRows * g.dim),
        prob(kAttentionTileRows * g.ld),
        acc(kAttentionTileRows * g.dim),
        score(kAttentionTileRows * g.ld),
        mask(g.block_q * g.ld),
        row_max(kAttentionTileRows),
        row_sum(kAttentionTileRows) {}
  Scratch<bf16> q_tile;    // (rows, D) the tile's queries
  Scratch<bf16> prob;      // (rows, ld) P rounded for P·V
  Scratch<float> acc;      // (rows, D) unnormalised output
  Scratch<float> score;    // (rows, ld) scores, then probabilities
  Scratch<float> mask;     // (tokens, ld) additive mask of a partial tile
  Scratch<float> row_max;  // (rows) running max m
  Scratch<float> row_sum;  // (rows) running sum l, relative to m
};

struct ForwardInputs {
  const bf16* q;             // (B, Sq, Hq, D)
  const uint32_t* k_packed;  // pack_key_blocks of k
  const bf16* v;             // (B, Sk, Hkv, D)
  const int32_t *q_pos, *q_seg, *k_pos, *k_seg;
  const std::vector<BlockBounds>& q_bounds;
  const std::vector<BlockBounds>& k_bounds;
};

template <typename Out>
void forward_tile(Out* out, float* lse, const ForwardInputs& in, const Geometry& g, int64_t b,
                  int64_t hk, int64_t c, int64_t qb, ForwardScratch& scratch, TileCounts& counts) {
  const int64_t tokens = g.tokens_in_qb(qb);
  const int64_t heads = g.heads_in_chunk(c);
  const int64_t rows = heads * tokens;
  bf16* q_tile = scratch.q_tile.data();
  bf16* prob = scratch.prob.data();
  float* acc = scratch.acc.data();
  float* score = scratch.score.data();
  float* m = scratch.row_max.data();
  float* l = scratch.row_sum.data();
  pack_tile_bf16(q_tile, in.q, g, b, hk, qb, c);
  std::fill(acc, acc + rows * g.dim, 0.0f);
  std::fill(m, m + rows, kNegInf);
  std::fill(l, l + rows, 0.0f);

  for (int64_t kb = 0; kb < g.n_kb; ++kb) {
    const TileMask kind =
        classify_tile(in.q_bounds[static_cast<size_t>(b * g.n_qb + qb)],
                      in.k_bounds[static_cast<size_t>(b * g.n_kb + kb)], g.window);
    if (kind == TileMask::kSkip) {
      ++counts.skipped;
      continue;
    }
    ++counts.computed;
    const int64_t keys = g.keys_in_kb(kb);
    const int64_t width = g.width_of_kb(kb);
    if (kind == TileMask::kPartial) {
      build_mask(scratch.mask.data(), g, b, qb, kb, in.q_pos, in.q_seg, in.k_pos, in.k_seg);
    }
    const float* mask = kind == TileMask::kPartial ? scratch.mask.data() : nullptr;
    attention_tile_gemm_bf16(rows, keys, g.dim, g.scale, q_tile, g.dim, nullptr, 0,
                             packed_block(in.k_packed, g, b, hk, kb), false, score, g.ld);
    attention_mask_scores(score, g.ld, rows, keys, width, mask, tokens);
    attention_softmax_step(score, g.ld, rows, width, m, l, acc, g.dim);
    // Columns past keys hold P = 0: the zero pad column an odd key count needs.
    round_rows(prob, score, rows, width, g.ld);
    attention_tile_gemm_bf16(rows, g.dim, keys, 1.0f, prob, g.ld,
                             in.v + g.kv_block_offset(b, hk, kb), g.kv_stride, nullptr, true, acc,
                             g.dim);
  }

  for (int64_t jj = 0; jj < heads; ++jj) {
    const int64_t h = hk * g.group + c * g.heads_per_tile + jj;
    for (int64_t s = 0; s < tokens; ++s) {
      const int64_t r = jj * tokens + s;
      const int64_t token = qb * g.block_q + s;
      Out* out_row = out + ((b * g.seq_q + token) * g.heads_q + h) * g.dim;
      const float* acc_row = acc + r * g.dim;
      const bool seen_any = l[r] > 0.0f;
      const float inv_sum = seen_any ? 1.0f / l[r] : 0.0f;
      for (int64_t d = 0; d < g.dim; ++d) store(out_row[d], acc_row[d] * inv_sum);
      lse[(b * g.heads_q + h) * g.seq_q + token] = seen_any ? m[r] + std::log(l[r]) : kNegInf;
    }
  }
}

// ---------------------------------------------------------------- backward

// Rows of a tile slot in GroupRows' transposed blocks: the most rows a tile has.
constexpr int64_t kSlotRows = kAttentionTileRows;

// One kv group's query-side rows, packed in tile order (see Geometry), with each tile's Q and dO
// also transposed into a slot (D, kSlotRows) per tile, zero past the tile's rows.
struct GroupRows {
  explicit GroupRows(const Geometry& g)
      : q(g.seq_q * g.group * g.dim),
        d_out(g.seq_q * g.group * g.dim),
        q_t(g.n_qb * g.n_chunks * g.dim * kSlotRows),
        d_out_t(g.n_qb * g.n_chunks * g.dim * kSlotRows),
        lse(g.seq_q * g.group),
        delta(g.seq_q * g.group) {}
  Scratch<bf16> q;        // (Sq · group, D)
  Scratch<bf16> d_out;    // (Sq · group, D) rounded
  Scratch<bf16> q_t;      // (tiles, D, kSlotRows) Qᵀ per tile
  Scratch<bf16> d_out_t;  // (tiles, D, kSlotRows) dOᵀ per tile
  Scratch<float> lse;     // (Sq · group) saved log-sum-exp
  Scratch<float> delta;   // (Sq · group) Σ_d d_out · out, from the rounded d_out
};

void transpose_tile(bf16* dst, const bf16* src, int64_t rows, int64_t dim) {
  for (int64_t d = 0; d < dim; ++d) {
    bf16* dst_row = dst + d * kSlotRows;
    for (int64_t r = 0; r < rows; ++r) dst_row[r] = src[r * dim + d];
    std::fill(dst_row + rows, dst_row + kSlotRows, bf16{});
  }
}

template <typename DOut, typename Out>
void pack_group(GroupRows& rows, const DOut* d_out, const Out* out, const float* lse, const bf16* q,
                const Geometry& g, int64_t b, int64_t hk) {
  for (int64_t qb = 0; qb < g.n_qb; ++qb) {
    const int64_t tokens = g.tokens_in_qb(qb);
    for (int64_t c = 0; c < g.n_chunks; ++c) {
      const int64_t row0 = g.tile_row(qb, c);
      const int64_t n_rows = g.heads_in_chunk(c) * tokens;
      const int64_t slot = (qb * g.n_chunks + c) * g.dim * kSlotRows;
      pack_tile_bf16(rows.q.data() + row0 * g.dim, q, g, b, hk, qb, c);
      pack_tile_bf16(rows.d_out.data() + row0 * g.dim, d_out, g, b, hk, qb, c);
      transpose_tile(rows.q_t.data() + slot, rows.q.data() + row0 * g.dim, n_rows, g.dim);
      transpose_tile(rows.d_out_t.data() + slot, rows.d_out.data() + row0 * g.dim, n_rows, g.dim);
      for (int64_t jj = 0; jj < g.heads_in_chunk(c); ++jj) {
        const int64_t h = hk * g.group + c * g.heads_per_tile + jj;
        for (int64_t s = 0; s < tokens; ++s) {
          const int64_t r = row0 + jj * tokens + s;
          const int64_t token = qb * g.block_q + s;
          const Out* out_row = out + ((b * g.seq_q + token) * g.heads_q + h) * g.dim;
          const bf16* d_out_row = rows.d_out.data() + r * g.dim;
          float delta = 0.0f;
          for (int64_t d = 0; d < g.dim; ++d) delta += widen(d_out_row[d]) * widen(out_row[d]);
          rows.delta.data()[r] = delta;
          rows.lse.data()[r] = lse[(b * g.heads_q + h) * g.seq_q + token];
        }
      }
    }
  }
}

struct BackwardScratch {
  explicit BackwardScratch(const Geometry& g)
      : prob(kAttentionTileRows * g.ld),
        d_score(kAttentionTileRows * g.ld),
        prob16(kAttentionTileRows * g.ld),
        d_score16(kAttentionTileRows * g.ld),
        mask(g.block_q * g.ld),
        dk_acc_t(g.dim * kAttentionBlockK),
        dv_acc_t(g.dim * kAttentionBlockK) {}
  Scratch<float> prob;      // (rows, ld) scores, then P
  Scratch<float> d_score;   // (rows, ld) dP, then dS
  Scratch<bf16> prob16;     // (rows, ld) P rounded
  Scratch<bf16> d_score16;  // (rows, ld) dS rounded
  Scratch<float> mask;      // (tokens, ld)
  Scratch<float> dk_acc_t;  // (D, kAttentionBlockK) this key block's dkᵀ over query tiles
  Scratch<float> dv_acc_t;  // (D, kAttentionBlockK)
};

struct BackwardInputs {
  const bf16* k;             // (B, Sk, Hkv, D)
  const uint32_t* k_packed;  // pack_key_blocks of k
  const uint32_t* v_packed;  // pack_key_blocks of v
  const int32_t *q_pos, *q_seg, *k_pos, *k_seg;
  const std::vector<BlockBounds>& q_bounds;
  const std::vector<BlockBounds>& k_bounds;
};

// dk, dv of key block kb of kv group (b, hk), and the block's share of the group's dq, added to
// dq_rows (packed like GroupRows).
void backward_key_block(float* dk, float* dv, float* dq_rows, const GroupRows& rows,
                        const BackwardInputs& in, const Geometry& g, int64_t b, int64_t hk,
                        int64_t kb, BackwardScratch& scratch, TileCounts& counts) {
  const int64_t keys = g.keys_in_kb(kb);
  const int64_t width = g.width_of_kb(kb);
  const bf16* k_block = in.k + g.kv_block_offset(b, hk, kb);
  const uint32_t* k_packed = packed_block(in.k_packed, g, b, hk, kb);
  const uint32_t* v_packed = packed_block(in.v_packed, g, b, hk, kb);
  float* prob = scratch.prob.data();
  float* d_score = scratch.d_score.data();
  bf16* prob16 = scratch.prob16.data();
  bf16* d_score16 = scratch.d_score16.data();
  float* dk_acc_t = scratch.dk_acc_t.data();
  float* dv_acc_t = scratch.dv_acc_t.data();
  std::fill(dk_acc_t, dk_acc_t + g.dim * kAttentionBlockK, 0.0f);
  std::fill(dv_acc_t, dv_acc_t + g.dim * kAttentionBlockK, 0.0f);

  for (int64_t qb = 0; qb < g.n_qb; ++qb) {
    const TileMask kind =
        classify_tile(in.q_bounds[static_cast<size_t>(b * g.n_qb + qb)],
                      in.k_bounds[static_cast<size_t>(b * g.n_kb + kb)], g.window);
    if (kind == TileMask::kSkip) {
      counts.skipped += g.n_chunks;
      continue;
    }
    const int64_t tokens = g.tokens_in_qb(qb);
    if (kind == TileMask::kPartial) {
      build_mask(scratch.mask.data(), g, b, qb, kb, in.q_pos, in.q_seg, in.k_pos, in.k_seg);
    }
    const float* mask = kind == TileMask::kPartial ? scratch.mask.data() : nullptr;
    for (int64_t c = 0; c < g.n_chunks; ++c) {
      ++counts.computed;
      const int64_t row0 = g.tile_row(qb, c);
      const int64_t n_rows = g.heads_in_chunk(c) * tokens;
      const int64_t slot = (qb * g.n_chunks + c) * g.dim * kSlotRows;
      attention_tile_gemm_bf16(n_rows, keys, g.dim, g.scale, rows.q.data() + row0 * g.dim, g.dim,
                               nullptr, 0, k_packed, false, prob, g.ld);
      attention_mask_scores(prob, g.ld, n_rows, keys, width, mask, tokens);
      // dP = dO · Vᵀ; the pad columns are 0 so that dS is 0 there (P is).
      attention_tile_gemm_bf16(n_rows, keys, g.dim, 1.0f, rows.d_out.data() + row0 * g.dim, g.dim,
                               nullptr, 0, v_packed, false, d_score, g.ld);
      for (int64_t r = 0; r < n_rows; ++r) {
        std::fill(d_score + r * g.ld + keys, d_score + r * g.ld + width, 0.0f);
      }
      attention_softmax_backward(prob, d_score, g.ld, n_rows, width, rows.lse.data() + row0,
                                 rows.delta.data() + row0);
      round_rows(prob16, prob, n_rows, width, g.ld);
      round_rows(d_score16, d_score, n_rows, width, g.ld);
      // dVᵀ += dOᵀ · P;  dKᵀ += scale · Qᵀ · dS;  dQ += scale · dS · K
      attention_tile_gemm_bf16(g.dim, keys, n_rows, 1.0f, rows.d_out_t.data() + slot, kSlotRows,
                               prob16, g.ld, nullptr, true, dv_acc_t, kAttentionBlockK);
      attention_tile_gemm_bf16(g.dim, keys, n_rows, g.scale, rows.q_t.data() + slot, kSlotRows,
                               d_score16, g.ld, nullptr, true, dk_acc_t, kAttentionBlockK);
      attention_tile_gemm_bf16(n_rows, g.dim, keys, g.scale, d_score16, g.ld, k_block, g.kv_stride,
                               nullptr, true, dq_rows + row0 * g.dim, g.dim);
    }
  }

  for (int64_t c = 0; c < keys; ++c) {
    const int64_t offset = ((b * g.seq_k + kb * kAttentionBlockK + c) * g.heads_kv + hk) * g.dim;
    for (int64_t d = 0; d < g.dim; ++d) {
      dk[offset + d] += dk_acc_t[d * kAttentionBlockK + c];
      dv[offset + d] += dv_acc_t[d * kAttentionBlockK + c];
    }
  }
}

}  // namespace

template <typename Out>
void attention_forward_bf16(Out* out, float* lse, const bf16* q, const bf16* k, const bf16* v,
                            const int32_t* q_pos, const int32_t* q_seg, const int32_t* k_pos,
                            const int32_t* k_seg, const AttentionParams& params,
                            AttentionStats* stats) {
  check_attention_params(params);
  check_even_head_dim(params);
  const Geometry g(params, attention_tiling(params));
  const auto q_bounds = block_bounds(q_pos, q_seg, g.batch, g.seq_q, g.block_q);
  const auto k_bounds = block_bounds(k_pos, k_seg, g.batch, g.seq_k, kAttentionBlockK);
  Scratch<uint32_t> k_packed(g.batch * g.heads_kv * g.n_kb * packed_block_words(g));
  pack_key_blocks(k_packed.data(), k, g);
  const ForwardInputs in{q, k_packed.data(), v, q_pos, q_seg, k_pos, k_seg, q_bounds, k_bounds};
  const int64_t n_items = g.batch * g.heads_kv * g.n_chunks * g.n_qb;
  int64_t computed = 0, skipped = 0;
#pragma omp parallel reduction(+ : computed, skipped)
  {
    ForwardScratch scratch(g);
    TileCounts counts;
#pragma omp for schedule(dynamic, 1)
    for (int64_t item = 0; item < n_items; ++item) {
      const int64_t qb = item % g.n_qb;
      const int64_t c = (item / g.n_qb) % g.n_chunks;
      const int64_t hk = (item / (g.n_qb * g.n_chunks)) % g.heads_kv;
      const int64_t b = item / (g.n_qb * g.n_chunks * g.heads_kv);
      forward_tile(out, lse, in, g, b, hk, c, qb, scratch, counts);
    }
    computed += counts.computed;
    skipped += counts.skipped;
  }
  add_stats(stats, computed, skipped);
}

template <typename DOut, typename Out>
void attention_backward_bf16(float* dq, float* dk, float* dv, const DOut* d_out, const Out* out,
                             const float* lse, const bf16* q, const bf16* k, const bf16* v,
                             const int32_t* q_pos, const int32_t* q_seg, const int32_t* k_pos,
                             const int32_t* k_seg, const AttentionParams& params,
                             AttentionStats* stats) {
  check_attention_params(params);
  check_even_head_dim(params);
  const Geometry g(params, attention_tiling(params));
  const auto q_bounds = block_bounds(q_pos, q_seg, g.batch, g.seq_q, g.block_q);
  const auto k_bounds = block_bounds(k_pos, k_seg, g.batch, g.seq_k, kAttentionBlockK);
  const int64_t n_groups = g.batch * g.heads_kv;
  const int64_t n_threads = omp_get_max_threads();
  const int64_t packed = g.seq_q * g.group * g.dim;
  const int64_t packed_kv = g.batch * g.heads_kv * g.n_kb * packed_block_words(g);
  Scratch<uint32_t> k_packed(packed_kv), v_packed(packed_kv);
  pack_key_blocks(k_packed.data(), k, g);
  pack_key_blocks(v_packed.data(), v, g);
  const BackwardInputs in{k,     k_packed.data(), v_packed.data(), q_pos,   q_seg,
                          k_pos, k_seg,           q_bounds,        k_bounds};
  // Key block kb belongs to split kb % n_split (causal work per key block falls with its index).
  const int64_t n_split = std::min(kBackwardSplits, g.n_kb);
  int64_t computed = 0, skipped = 0;

  if (n_groups >= n_threads || g.n_kb <= 1) {
    // Each thread owns whole groups and runs their splits one after the other.
#pragma omp parallel reduction(+ : computed, skipped)
    {
      GroupRows rows(g);
      Scratch<float> dq_rows(packed);
      BackwardScratch scratch(g);
      TileCounts counts;
      const std::vector<const float*> partials{dq_rows.data()};
#pragma omp for schedule(dynamic, 1)
      for (int64_t group = 0; group < n_groups; ++group) {
        const int64_t b = group / g.heads_kv, hk = group % g.heads_kv;
        pack_group(rows, d_out, out, lse, q, g, b, hk);
        for (int64_t split = 0; split < n_split; ++split) {
          std::fill(dq_rows.data(), dq_rows.data() + packed, 0.0f);
          for (int64_t kb = split; kb < g.n_kb; kb += n_split) {
            backward_key_block(dk, dv, dq_rows.data(), rows, in, g, b, hk, kb, scratch, counts);
          }
          add_group_dq(dq, partials, g, b, hk, 0, g.n_qb);
        }
      }
      computed += counts.computed;
      skipped += counts.skipped;
    }
    add_stats(stats, computed, skipped);
    return;
  }

  // Fewer kv groups than threads: the threads share a group's splits, then add the partials in
  // split order (per element the same sequence of adds as above).
  GroupRows rows(g);
  std::vector<Scratch<float>> dq_partials;  // n_split × (Sq · group, D)
  dq_partials.reserve(static_cast<size_t>(n_split));
  for (int64_t i = 0; i < n_split; ++i) dq_partials.emplace_back(packed);
  std::vector<const float*> partials;
  for (const Scratch<float>& partial : dq_partials) partials.push_back(partial.data());
  for (int64_t group = 0; group < n_groups; ++group) {
    const int64_t b = group / g.heads_kv, hk = group % g.heads_kv;
    pack_group(rows, d_out, out, lse, q, g, b, hk);
#pragma omp parallel reduction(+ : computed, skipped)
    {
      BackwardScratch scratch(g);
      TileCounts counts;
#pragma omp for schedule(dynamic, 1)
      for (int64_t split = 0; split < n_split; ++split) {
        float* dq_rows = dq_partials[static_cast<size_t>(split)].data();
        std::fill(dq_rows, dq_rows + packed, 0.0f);
        for (int64_t kb = split; kb < g.n_kb; kb += n_split) {
          backward_key_block(dk, dv, dq_rows, rows, in, g, b, hk, kb, scratch, counts);
        }
      }
#pragma omp for schedule(static)
      for (int64_t qb = 0; qb < g.n_qb; ++qb) add_group_dq(dq, partials, g, b, hk, qb, qb + 1);
      computed += counts.computed;
      skipped += counts.skipped;
    }
  }
  add_stats(stats, computed, skipped);
}

template void attention_forward_bf16<float>(float*, float*, const bf16*, const bf16*, const bf16*,
                                            const int32_t*, const int32_t*, const int32_t*,
                                            const int32_t*, const AttentionParams&,
                                            AttentionStats*);
template void attention_forward_bf16<bf16>(bf16*, float*, const bf16*, const bf16*, const bf16*,
                                           const int32_t*, const int32_t*, const int32_t*,
                                           const int32_t*, const AttentionParams&, AttentionStats*);
#define MAXCTX_INSTANTIATE_BACKWARD(DOut, Out)                                                 \
  template void attention_backward_bf16<DOut, Out>(                                            \
      float*, float*, float*, const DOut*, const Out*, const float*, const bf16*, const bf16*, \
      const bf16*, const int32_t*, const int32_t*, const int32_t*, const int32_t*,             \
      const AttentionParams&, AttentionStats*);
MAXCTX_INSTANTIATE_BACKWARD(float, float)
MAXCTX_INSTANTIATE_BACKWARD(float, bf16)
MAXCTX_INSTANTIATE_BACKWARD(bf16, float)
MAXCTX_INSTANTIATE_BACKWARD(bf16, bf16)
#undef MAXCTX_INSTANTIATE_BACKWARD

}  // namespace maxctx::kernels::cpu

// Flash-style attention on the CPU: tiling, masks and threads here, the SIMD work of a tile
// (products and softmax passes, dispatched per Highway target) in attention_tiles.h.
//
// The query rows of one kv group are packed head-major per token block (row j·bq + s is query
// head j of the group at token s of the block), so one tile holds several query heads that share
// the tile's mask and the kv block. Forward keeps a running max m and sum l per row (online
// softmax) and rescales its output accumulator when m grows. Backward recomputes P from the
// saved lse, so the lse and out it is given may be global ones while k/v are one chunk of keys.
// Threads never share an output element: forward splits over (batch, kv head, head chunk, query
// block); backward over (batch, kv head), or, with fewer of those than threads, over key blocks
// of one kv group with per-split dq partials summed in a fixed order.
#include "maxctx/kernels/cpu/attention.h"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "maxctx/core/buffer.h"
#include "maxctx/core/check.h"
#include "maxctx/kernels/cpu/attention_blocks.h"
#include "maxctx/kernels/cpu/attention_tiles.h"

namespace maxctx::kernels::cpu {
namespace {

using namespace attention_internal;  // NOLINT(google-build-using-namespace)

// kv_t (B, Hkv, n_kb, D, ld) = every key block of kv (B, Sk, Hkv, D) transposed, so that the
// score products read B k-major; pad keys are zero.
void pack_transposed(float* kv_t, const float* kv, const Geometry& g) {
  const int64_t n_blocks = g.batch * g.heads_kv * g.n_kb;
#pragma omp parallel for schedule(static)
  for (int64_t blk = 0; blk < n_blocks; ++blk) {
    const int64_t kb = blk % g.n_kb;
    const int64_t hk = (blk / g.n_kb) % g.heads_kv;
    const int64_t b = blk / (g.n_kb * g.heads_kv);
    const int64_t keys = g.keys_in_kb(kb);
    const float* src = g.kv_block(kv, b, hk, kb);
    float* dst = kv_t + blk * g.dim * g.ld;
    for (int64_t d = 0; d < g.dim; ++d) {
      for (int64_t c = 0; c < keys; ++c) dst[d * g.ld + c] = src[c * g.kv_stride + d];
      std::fill(dst + d * g.ld + keys, dst + (d + 1) * g.ld, 0.0f);
    }
  }
}

// Copies query-shaped rows (B, Sq, Hq, D) of tile (qb, c) of kv group (b, hk) into packed
// (heads_in_chunk · tokens, D) order, times mult.
void pack_tile(float* dst, const float* src, const Geometry& g, int64_t b, int64_t hk, int64_t qb,
               int64_t c, float mult) {
  const int64_t tokens = g.tokens_in_qb(qb);
  const int64_t heads = g.heads_in_chunk(c);
  for (int64_t jj = 0; jj < heads; ++jj) {
    const int64_t h = hk * g.group + c * g.heads_per_tile + jj;
    for (int64_t s = 0; s < tokens; ++s) {
      const float* row = src + ((b * g.seq_q + qb * g.block_q + s) * g.heads_q + h) * g.dim;
      float* packed = dst + (jj * tokens + s) * g.dim;
      for (int64_t d = 0; d < g.dim; ++d) packed[d] = mult * row[d];
    }
  }
}
// (mask is null for a fully visible tile); columns from keys to width are -inf.
void tile_scores(float* score, const float* q_tile, int64_t rows, const float* k_block_t,
                 int64_t keys, const float* mask, int64_t tokens, const Geometry& g) {
  const int64_t width = round_up(keys, kAttentionScoreAlign);
  attention_tile_gemm(rows, width, g.dim, 1.0f, q_tile, g.dim, false, k_block_t, g.ld, false, score,
                      g.ld);
  attention_mask_scores(score, g.ld, rows, keys, width, mask, tokens);
}

}  // namespace

AttentionTiling attention_tiling(const AttentionParams& params) {
  const int64_t heads = std::min(params.group_size(), kAttentionTileRows / kAttentionMinBlockQ);
  return {heads, kAttentionTileRows / heads};
}

// ---------------------------------------------------------------- forward

namespace {

struct ForwardScratch {
  explicit ForwardScratch(const Geometry& g)
      : q_tile(kAttentionTileRows * g.dim),
        acc(kAttentionTileRows * g.dim),
        score(kAttentionTileRows * g.ld),
        mask(g.block_q * g.ld),
        row_max(kAttentionTileRows),
        row_sum(kAttentionTileRows) {}
  FloatScratch q_tile;   // (rows, D) scaled queries of the tile
  FloatScratch acc;      // (rows, D) unnormalised output
  FloatScratch score;    // (rows, ld) scores, then probabilities
  FloatScratch mask;     // (tokens, ld) additive mask of a partial tile
  FloatScratch row_max;  // (rows) running max m
  FloatScratch row_sum;  // (rows) running sum l, relative to m
};

void forward_tile(float* out, float* lse, const float* q, const float* k_t, const float* v,
                  const int32_t* q_pos, const int32_t* q_seg, const int32_t* k_pos,
                  const int32_t* k_seg, const Geometry& g, const std::vector<BlockBounds>& q_bounds,
                  const std::vector<BlockBounds>& k_bounds, int64_t b, int64_t hk, int64_t c,
                  int64_t qb, ForwardScratch& scratch, TileCounts& counts) {
  const int64_t tokens = g.tokens_in_qb(qb);
  const int64_t heads = g.heads_in_chunk(c);
  const int64_t rows = heads * tokens;
  float* q_tile = scratch.q_tile.data();
  float* acc = scratch.acc.data();
  float* score = scratch.score.data();
  float* m = scratch.row_max.data();
  float* l = scratch.row_sum.data();
  pack_tile(q_tile, q, g, b, hk, qb, c, g.scale);
  std::fill(acc, acc + rows * g.dim, 0.0f);
  std::fill(m, m + rows, kNegInf);
  std::fill(l, l + rows, 0.0f);

  for (int64_t kb = 0; kb < g.n_kb; ++kb) {
    const TileMask kind = classify_tile(q_bounds[static_cast<size_t>(b * g.n_qb + qb)],
                                        k_bounds[static_cast<size_t>(b * g.n_kb + kb)], g.window);
    if (kind == TileMask::kSkip) {
      ++counts.skipped;
      continue;
    }
    ++counts.computed;
    const int64_t keys = g.keys_in_kb(kb);
    const int64_t width = g.width_of_kb(kb);
    if (kind == TileMask::kPartial) {
      build_mask(scratch.mask.data(), g, b, qb, kb, q_pos, q_seg, k_pos, k_seg);
    }
    const float* mask = kind == TileMask::kPartial ? scratch.mask.data() : nullptr;
    tile_scores(score, q_tile, rows, g.kv_block_t(k_t, b, hk, kb), keys, mask, tokens, g);
    attention_softmax_step(score, g.ld, rows, width, m, l, acc, g.dim);
    attention_tile_gemm(rows, g.dim, keys, 1.0f, score, g.ld, false, g.kv_block(v, b, hk, kb),
                        g.kv_stride, true, acc, g.dim);
  }

  for (int64_t jj = 0; jj < heads; ++jj) {
    const int64_t h = hk * g.group + c * g.heads_per_tile + jj;
    for (int64_t s = 0; s < tokens; ++s) {
      const int64_t r = jj * tokens + s;
      const int64_t token = qb * g.block_q + s;
      float* out_row = out + ((b * g.seq_q + token) * g.heads_q + h) * g.dim;
      const float* acc_row = acc + r * g.dim;
      const bool seen_any = l[r] > 0.0f;
      const float inv_sum = seen_any ? 1.0f / l[r] : 0.0f;
      for (int64_t d = 0; d < g.dim; ++d) out_row[d] = acc_row[d] * inv_sum;
      lse[(b * g.heads_q + h) * g.seq_q + token] = seen_any ? m[r] + std::log(l[r]) : kNegInf;
    }
  }
}

}  // namespace

void attention_forward(float* out, float* lse, const float* q, const float* k, const float* v,
                       const int32_t* q_pos, const int32_t* q_seg, const int32_t* k_pos,
                       const int32_t* k_seg, const AttentionParams& params, AttentionStats* stats) {
  check_attention_params(params);
  const Geometry g(params, attention_tiling(params));
  const auto q_bounds = block_bounds(q_pos, q_seg, g.batch, g.seq_q, g.block_q);
  const auto k_bounds = block_bounds(k_pos, k_seg, g.batch, g.seq_k, kAttentionBlockK);
  FloatScratch k_t(g.batch * g.heads_kv * g.n_kb * g.dim * g.ld);  // (B, Hkv, n_kb, D, ld)
  pack_transposed(k_t.data(), k, g);
  const int64_t n_items = g.batch * g.heads_kv * g.n_chunks * g.n_qb;
  int64_t computed = 0, skipped = 0;
#pragma omp parallel reduction(+ : computed, skipped)
  {
    ForwardScratch scratch(g);
    TileCounts counts;
    // Causal tiles differ in work (later query blocks see more keys): hand them out one by one.
#pragma omp for schedule(dynamic, 1)
    for (int64_t item = 0; item < n_items; ++item) {
      const int64_t qb = item % g.n_qb;
      const int64_t c = (item / g.n_qb) % g.n_chunks;
      const int64_t hk = (item / (g.n_qb * g.n_chunks)) % g.heads_kv;
      const int64_t b = item / (g.n_qb * g.n_chunks * g.heads_kv);
      forward_tile(out, lse, q, k_t.data(), v, q_pos, q_seg, k_pos, k_seg, g, q_bounds, k_bounds, b,
                   hk, c, qb, scratch, counts);
    }
    computed += counts.computed;
    skipped += counts.skipped;
  }
  add_stats(stats, computed, skipped);
}

// ---------------------------------------------------------------- backward

namespace {

// One kv group's query-side rows, packed (Sq · group rows, in tile order; see Geometry).
struct GroupRows {
  explicit GroupRows(const Geometry& g)
      : q_scaled(g.seq_q * g.group * g.dim),
        d_out(g.seq_q * g.group * g.dim),
        lse(g.seq_q * g.group),
        delta(g.seq_q * g.group) {}
  FloatScratch q_scaled;  // (Sq · group, D) scale · q
  FloatScratch d_out;     // (Sq · group, D)
  FloatScratch lse;       // (Sq · group) saved log-sum-exp
  FloatScratch delta;     // (Sq · group) Σ_d d_out · out
};

void pack_group(GroupRows& rows, const float* d_out, const float* out, const float* lse,
                const float* q, const Geometry& g, int64_t b, int64_t hk) {
  for (int64_t qb = 0; qb < g.n_qb; ++qb) {
    const int64_t tokens = g.tokens_in_qb(qb);
    for (int64_t c = 0; c < g.n_chunks; ++c) {
      const int64_t row0 = g.tile_row(qb, c);
      pack_tile(rows.q_scaled.data() + row0 * g.dim, q, g, b, hk, qb, c, g.scale);
      pack_tile(rows.d_out.data() + row0 * g.dim, d_out, g, b, hk, qb, c, 1.0f);
      for (int64_t jj = 0; jj < g.heads_in_chunk(c); ++jj) {
        const int64_t h = hk * g.group + c * g.heads_per_tile + jj;
        for (int64_t s = 0; s < tokens; ++s) {
          const int64_t r = row0 + jj * tokens + s;
          const int64_t token = qb * g.block_q + s;
          const float* out_row = out + ((b * g.seq_q + token) * g.heads_q + h) * g.dim;
          const float* d_out_row = rows.d_out.data() + r * g.dim;
          float delta = 0.0f;
          for (int64_t d = 0; d < g.dim; ++d) delta += d_out_row[d] * out_row[d];
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
        mask(g.block_q * g.ld),
        dk_acc(kAttentionBlockK * g.dim),
        dv_acc(kAttentionBlockK * g.dim) {}
  FloatScratch prob;     // (rows, ld) scores, then P
  FloatScratch d_score;  // (rows, ld) dP, then dS
  FloatScratch mask;     // (tokens, ld)
  FloatScratch dk_acc;   // (keys, D) this key block's dk, summed over query tiles
  FloatScratch dv_acc;   // (keys, D)
};

// Inputs shared by every key block of a backward call.
struct BackwardInputs {
  const float* k;    // (B, Sk, Hkv, D)
  const float* k_t;  // (B, Hkv, n_kb, D, ld) from pack_transposed
  const float* v_t;  // (B, Hkv, n_kb, D, ld)
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
  const float* k_block = g.kv_block(in.k, b, hk, kb);
  const float* k_block_t = g.kv_block_t(in.k_t, b, hk, kb);
  const float* v_block_t = g.kv_block_t(in.v_t, b, hk, kb);
  float* prob = scratch.prob.data();
  float* d_score = scratch.d_score.data();
  float* dk_acc = scratch.dk_acc.data();
  float* dv_acc = scratch.dv_acc.data();
  std::fill(dk_acc, dk_acc + keys * g.dim, 0.0f);
  std::fill(dv_acc, dv_acc + keys * g.dim, 0.0f);

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
      const float* q_tile = rows.q_scaled.data() + row0 * g.dim;
      const float* d_out_tile = rows.d_out.data() + row0 * g.dim;
      tile_scores(prob, q_tile, n_rows, k_block_t, keys, mask, tokens, g);
      // dP = dO · Vᵀ, then P and dS in place
      attention_tile_gemm(n_rows, width, g.dim, 1.0f, d_out_tile, g.dim, false, v_block_t, g.ld,
                          false, d_score, g.ld);
      attention_softmax_backward(prob, d_score, g.ld, n_rows, width, rows.lse.data() + row0,
                                 rows.delta.data() + row0);
      // dV += Pᵀ · dO;  dK += dSᵀ · (scale · Q);  dQ += scale · dS · K
      attention_tile_gemm(keys, g.dim, n_rows, 1.0f, prob, g.ld, true, d_out_tile, g.dim, true,
                          dv_acc, g.dim);
      attention_tile_gemm(keys, g.dim, n_rows, 1.0f, d_score, g.ld, true, q_tile, g.dim, true,
                          dk_acc, g.dim);
      attention_tile_gemm(n_rows, g.dim, keys, g.scale, d_score, g.ld, false, k_block, g.kv_stride,
                          true, dq_rows + row0 * g.dim, g.dim);
    }
  }

  for (int64_t c = 0; c < keys; ++c) {
    const int64_t offset = ((b * g.seq_k + kb * kAttentionBlockK + c) * g.heads_kv + hk) * g.dim;
    for (int64_t d = 0; d < g.dim; ++d) {
      dk[offset + d] += dk_acc[c * g.dim + d];
      dv[offset + d] += dv_acc[c * g.dim + d];
    }
  }
}

}  // namespace

void attention_backward(float* dq, float* dk, float* dv, const float* d_out, const float* out,
                        const float* lse, const float* q, const float* k, const float* v,
                        const int32_t* q_pos, const int32_t* q_seg, const int32_t* k_pos,
                        const int32_t* k_seg, const AttentionParams& params,
                        AttentionStats* stats) {
  check_attention_params(params);
  const Geometry g(params, attention_tiling(params));
  const auto q_bounds = block_bounds(q_pos, q_seg, g.batch, g.seq_q, g.block_q);
  const auto k_bounds = block_bounds(k_pos, k_seg, g.batch, g.seq_k, kAttentionBlockK);
  const int64_t n_groups = g.batch * g.heads_kv;
  const int64_t n_threads = omp_get_max_threads();
  const int64_t packed = g.seq_q * g.group * g.dim;
  const int64_t packed_kv = g.batch * g.heads_kv * g.n_kb * g.dim * g.ld;
  FloatScratch k_t(packed_kv), v_t(packed_kv);  // (B, Hkv, n_kb, D, ld) each
  pack_transposed(k_t.data(), k, g);
  pack_transposed(v_t.data(), v, g);
  const BackwardInputs in{k,     k_t.data(), v_t.data(), q_pos,   q_seg,
                          k_pos, k_seg,      q_bounds,   k_bounds};
  int64_t computed = 0, skipped = 0;

  if (n_groups >= n_threads || g.n_kb <= 1) {
    // Enough kv groups to go round: each thread owns whole groups, their dq rows included.
#pragma omp parallel reduction(+ : computed, skipped)
    {
      GroupRows rows(g);
      FloatScratch dq_rows(packed);
      BackwardScratch scratch(g);
      TileCounts counts;
      const std::vector<const float*> partials{dq_rows.data()};
#pragma omp for schedule(dynamic, 1)
      for (int64_t group = 0; group < n_groups; ++group) {
        const int64_t b = group / g.heads_kv, hk = group % g.heads_kv;
        pack_group(rows, d_out, out, lse, q, g, b, hk);
        std::fill(dq_rows.data(), dq_rows.data() + packed, 0.0f);
        for (int64_t kb = 0; kb < g.n_kb; ++kb) {
          backward_key_block(dk, dv, dq_rows.data(), rows, in, g, b, hk, kb, scratch, counts);
        }
        add_group_dq(dq, partials, g, b, hk, 0, g.n_qb);
      }
      computed += counts.computed;
      skipped += counts.skipped;
    }
    add_stats(stats, computed, skipped);
    return;
  }

  // Fewer kv groups than threads: the threads share one group at a time. Key blocks are dealt
  // round-robin to n_split splits (causal work per key block falls with its index); each split
  // sums its dq share into its own partial and the partials are added in split order, so the
  // result depends on the thread count only.
  const int64_t n_split = std::min(n_threads, g.n_kb);
  GroupRows rows(g);
  std::vector<FloatScratch> dq_partials;  // n_split × (Sq · group, D)
  dq_partials.reserve(static_cast<size_t>(n_split));
  for (int64_t i = 0; i < n_split; ++i) dq_partials.emplace_back(packed);
  std::vector<const float*> partials;
  for (const FloatScratch& partial : dq_partials) partials.push_back(partial.data());
  for (int64_t group = 0; group < n_groups; ++group) {
    const int64_t b = group / g.heads_kv, hk = group % g.heads_kv;
    pack_group(rows, d_out, out, lse, q, g, b, hk);
#pragma omp parallel num_threads(static_cast <int>(n_split)) reduction(+ : computed, skipped)
    {
      BackwardScratch scratch(g);
      TileCounts counts;
      // A split is the same set of key blocks whichever thread runs it, should the runtime
      // grant fewer threads than asked for.
      for (int64_t split = omp_get_thread_num(); split < n_split; split += omp_get_num_threads()) {
        float* dq_rows = dq_partials[static_cast<size_t>(split)].data();
        std::fill(dq_rows, dq_rows + packed, 0.0f);
        for (int64_t kb = split; kb < g.n_kb; kb += n_split) {
          backward_key_block(dk, dv, dq_rows, rows, in, g, b, hk, kb, scratch, counts);
        }
      }
#pragma omp barrier
#pragma omp for schedule(static)
      for (int64_t qb = 0; qb < g.n_qb; ++qb) add_group_dq(dq, partials, g, b, hk, qb, qb + 1);
      computed += counts.computed;
      skipped += counts.skipped;
    }
  }
  add_stats(stats, computed, skipped);
}

// ---------------------------------------------------------------- merge

void attention_merge(float* out, float* lse, const float* out_a, const float* lse_a,
                     const float* out_b, const float* lse_b, int64_t batch, int64_t seq_q,
                     int64_t heads_q, int64_t head_dim) {
  const int64_t n_rows = batch * heads_q * seq_q;
#pragma omp parallel for schedule(static)
  for (int64_t l = 0; l < n_rows; ++l) {
    const int64_t i = l % seq_q;
    const int64_t h = (l / seq_q) % heads_q;
    const int64_t b = l / (seq_q * heads_q);
    const float la = lse_a[l], lb = lse_b[l];
    const float m = std::max(la, lb);
    const bool empty = m == kNegInf;  // both sides saw nothing; avoid exp(-inf - -inf)
    const float wa = empty ? 0.0f : std::exp(la - m);
    const float wb = empty ? 0.0f : std::exp(lb - m);
    const float inv_sum = empty ? 0.0f : 1.0f / (wa + wb);
    const float ca = wa * inv_sum, cb = wb * inv_sum;
    const int64_t row = ((b * seq_q + i) * heads_q + h) * head_dim;
    // A side with weight 0 is not read, so whatever it holds cannot leak in as NaN.
    for (int64_t d = 0; d < head_dim; ++d) {
      const float from_a = ca > 0.0f ? ca * out_a[row + d] : 0.0f;
      const float from_b = cb > 0.0f ? cb * out_b[row + d] : 0.0f;
      out[row + d] = from_a + from_b;
    }
    lse[l] = empty ? kNegInf : m + std::log(wa + wb);
  }
}

}  // namespace maxctx::kernels::cpu

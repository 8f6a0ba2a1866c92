#include "maxctx/infer/attention.h"

#include <algorithm>

#include "maxctx/core/check.h"
#include "maxctx/kernels/cpu/attention.h"
#include "maxctx/kernels/cpu/single_query_attention.h"

namespace maxctx::infer {

PrefillAttention::PrefillAttention(const Communicator& ca, DecodeSharding sharding, KvCache& cache)
    : ca_(ca), sharding_(sharding), cache_(cache), attention_(ca) {}

void PrefillAttention::forward(int64_t layer, float* out, const float* q, const float* k,
                               const float* v, const parallel::TokenLayout& tokens,
                               const kernels::AttentionParams& dims) {
  const int64_t B = tokens.batch, S = tokens.seq;
  lse_.resize(static_cast<size_t>(B * dims.heads_q * S));
  attention_.forward(out, lse_.data(), q, k, v, tokens, dims);
  const int64_t row_elements = dims.heads_kv * dims.head_dim;
  if (sharding_ == DecodeSharding::kBatch && ca_.size() > 1) {
    store_batch_sharded(layer, k, v, tokens, row_elements);
    return;
  }
  MAXCTX_CHECK(B == cache_.shape().slots && S <= cache_.shape().prefill_rows,
               "prefill of (B={}, S={}) for a cache of {} slots x {} prefill rows", B, S,
               cache_.shape().slots, cache_.shape().prefill_rows);
  for (int64_t b = 0; b < B; ++b) {
    if (layer == 0) {
      cache_.set_rows(b, 0, S, tokens.positions + b * S, tokens.segment_ids + b * S);
    }
    cache_.store(layer, b, 0, S, k + b * S * row_elements, v + b * S * row_elements);
  }
}

void PrefillAttention::store_batch_sharded(int64_t layer, const float* k, const float* v,
                                           const parallel::TokenLayout& tokens,
                                           int64_t row_elements) {
  const int ca = ca_.size();
  const int64_t B = tokens.batch, S = tokens.seq;
  const int64_t slots = cache_.shape().slots;
  MAXCTX_CHECK(B == slots * ca && ca * S <= cache_.shape().prefill_rows,
               "batch-sharded prefill of (B={}, S={}) over {} ranks for a cache of {} slots x {} "
               "prefill rows",
               B, S, ca, slots, cache_.shape().prefill_rows);
  const int64_t kv_numel = B * S * row_elements;
  send_.resize(static_cast<size_t>(2 * kv_numel));
  std::copy(k, k + kv_numel, send_.begin());
  std::copy(v, v + kv_numel, send_.begin() + kv_numel);
  recv_.resize(static_cast<size_t>(ca * 2 * kv_numel));
  ca_.all_gather(std::span<const float>(send_), std::span<float>(recv_));
  if (layer == 0) {
    send_ids_.resize(static_cast<size_t>(2 * B * S));
    std::copy(tokens.positions, tokens.positions + B * S, send_ids_.begin());
    std::copy(tokens.segment_ids, tokens.segment_ids + B * S, send_ids_.begin() + B * S);
    recv_ids_.resize(static_cast<size_t>(ca * 2 * B * S));
    ca_.all_gather(std::span<const int32_t>(send_ids_), std::span<int32_t>(recv_ids_));
  }
  // Rank c sent columns [c·S, (c+1)·S) of every slot; this rank keeps slots
  // [rank·slots, (rank+1)·slots) whole.
  for (int64_t j = 0; j < slots; ++j) {
    const int64_t g = ca_.rank() * slots + j;
    for (int c = 0; c < ca; ++c) {
      const float* from = recv_.data() + c * 2 * kv_numel + g * S * row_elements;
      if (layer == 0) {
        const int32_t* ids = recv_ids_.data() + c * 2 * B * S;
        cache_.set_rows(j, c * S, S, ids + g * S, ids + B * S + g * S);
      }
      cache_.store(layer, j, c * S, S, from, from + kv_numel);
    }
  }
}

DecodeAttention::DecodeAttention(const Communicator& ca, DecodeSharding sharding, KvCache& cache)
    : ca_(ca), sharding_(sharding), cache_(cache) {}

void DecodeAttention::begin_step(std::span<const int32_t> positions,
                                 std::span<const uint8_t> active) {
  const int64_t slots = cache_.shape().slots;
  MAXCTX_CHECK(static_cast<int64_t>(positions.size()) == slots &&
                   static_cast<int64_t>(active.size()) == slots,
               "a decode step for {} slots, the cache has {}", positions.size(), slots);
  rows_.assign(static_cast<size_t>(slots), -1);
  for (int64_t b = 0; b < slots; ++b) {
    const bool mine =
        sharding_ == DecodeSharding::kBatch || decode_owner(positions[b], ca_.size()) == ca_.rank();
    if (active[b] && mine) rows_[b] = cache_.append_decode_row(b, positions[b]);
  }
}

void DecodeAttention::forward(int64_t layer, float* out, const float* q, const float* k,
                              const float* v, const parallel::TokenLayout& tokens,
                              const kernels::AttentionParams& dims) {
  const int64_t B = tokens.batch;
  const int64_t Hq = dims.heads_q, D = dims.head_dim;
  const int64_t row_elements = dims.heads_kv * D;
  MAXCTX_CHECK(tokens.seq == 1 && B == static_cast<int64_t>(rows_.size()),
               "decode attention takes one token per slot ({} slots), got (B={}, S={}); call "
               "begin_step first",
               rows_.size(), B, tokens.seq);
  for (int64_t b = 0; b < B; ++b) {
    if (rows_[b] >= 0) {
      cache_.store(layer, b, rows_[b], 1, k + b * row_elements, v + b * row_elements);
    }
  }
  const KvView kv = cache_.view(layer);
  q_seg_.assign(static_cast<size_t>(B), 1);
  kernels::AttentionParams p = dims;
  p.batch = B;
  p.seq_q = 1;
  p.seq_k = kv.rows;
  const int ca = ca_.size();
  const bool merge = sharding_ == DecodeSharding::kSequence && ca > 1;
  const int64_t out_numel = B * Hq * D;
  const int64_t part = out_numel + B * Hq;  // a rank's partial: out, then lse
  lse_.resize(static_cast<size_t>(B * Hq));
  partial_.resize(static_cast<size_t>(merge ? part : 0));
  float* o = merge ? partial_.data() : out;
  float* lse = merge ? partial_.data() + out_numel : lse_.data();
  if (kv.k_codes != nullptr) {
    kernels::cpu::single_query_attention_int8(o, lse, q, kv.k_codes, kv.k_scale, kv.v_codes,
                                              kv.v_scale, tokens.positions, q_seg_.data(),
                                              kv.positions, kv.segments, p);
  } else {
    kernels::cpu::single_query_attention(o, lse, q, kv.k, kv.v, tokens.positions, q_seg_.data(),
                                         kv.positions, kv.segments, p);
  }
  if (!merge) return;
  gathered_.resize(static_cast<size_t>(ca * part));
  ca_.all_gather(std::span<const float>(partial_), std::span<float>(gathered_));
  std::copy(gathered_.begin(), gathered_.begin() + out_numel, out);
  std::copy(gathered_.begin() + out_numel, gathered_.begin() + part, lse_.begin());
  for (int c = 1; c < ca; ++c) {
    const float* other = gathered_.data() + c * part;
    kernels::cpu::attention_merge(out, lse_.data(), out, lse_.data(), other, other + out_numel, B,
                                  1, Hq, D);
  }
}

}  // namespace maxctx::infer

#include "maxctx/parallel/decode_attention.h"

#include <algorithm>

#include "maxctx/core/check.h"

namespace maxctx::parallel {

PrefillAttention::PrefillAttention(const kernels::Kernels& kernels, const Communicator& ca,
                                   DecodeSharding sharding, KvCache& cache)
    : kernels_(kernels), ca_(ca), sharding_(sharding), cache_(cache), attention_(ca, kernels) {}

void PrefillAttention::forward(int64_t layer, TensorView out_view, TensorView, TensorView q_view,
                               TensorView k_view, TensorView v_view, const TokenLayout& tokens,
                               const kernels::AttentionParams& dims) {
  const int64_t B = tokens.batch, S = tokens.seq;
  kernels_.reserve(lse_, B * dims.heads_q * S);
  const float* k = k_view.data<float>();
  const float* v = v_view.data<float>();
  attention_.forward(out_view.data<float>(), lse_.data<float>(), q_view.data<float>(), k, v, tokens,
                     dims);
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
                                           const TokenLayout& tokens, int64_t row_elements) {
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

DecodeAttention::DecodeAttention(const kernels::Kernels& kernels, const Communicator& ca,
                                 DecodeSharding sharding, KvCache& cache)
    : kernels_(kernels), ca_(ca), sharding_(sharding), cache_(cache) {}

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

void DecodeAttention::forward(int64_t layer, TensorView out_view, TensorView, TensorView q_view,
                              TensorView k_view, TensorView v_view, const TokenLayout& tokens,
                              const kernels::AttentionParams& dims) {
  const float* k = k_view.data<float>();
  const float* v = v_view.data<float>();
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
  kernels_.reserve(lse_, B * Hq);
  if (merge) kernels_.reserve(partial_, part);
  const TensorView lse_view = lse_.view().rows(0, B * Hq);
  const TensorView o = merge ? partial_.view().rows(0, out_numel) : out_view;
  const TensorView lse = merge ? partial_.view().rows(out_numel, part) : lse_view;
  const int64_t kv_numel = B * kv.rows * row_elements;
  if (kv.k_codes != nullptr) {
    const auto codes = [&](const int8_t* data) {
      return TensorView(const_cast<int8_t*>(data), DType::kI8, Shape{kv_numel});
    };
    kernels_.single_query_attention_int8(o, lse, q_view, codes(kv.k_codes),
                                         TensorView::of(kv.k_scale, B * kv.rows), codes(kv.v_codes),
                                         TensorView::of(kv.v_scale, B * kv.rows), tokens.positions,
                                         q_seg_.data(), kv.positions, kv.segments, p);
  } else {
    kernels_.single_query_attention(o, lse, q_view, TensorView::of(kv.k, kv_numel),
                                    TensorView::of(kv.v, kv_numel), tokens.positions, q_seg_.data(),
                                    kv.positions, kv.segments, p);
  }
  if (!merge) return;
  kernels_.reserve(gathered_, ca * part);
  const float* partial = partial_.data<float>();
  float* gathered = gathered_.data<float>();
  ca_.all_gather(std::span<const float>(partial, static_cast<size_t>(part)),
                 std::span<float>(gathered, static_cast<size_t>(ca * part)));
  kernels_.copy(out_view, TensorView::of(gathered, out_numel));
  kernels_.copy(lse_view, TensorView::of(gathered + out_numel, B * Hq));
  for (int c = 1; c < ca; ++c) {
    const float* other = gathered + c * part;
    kernels_.attention_merge(out_view, lse_view, out_view, lse_view,
                             TensorView::of(other, out_numel),
                             TensorView::of(other + out_numel, B * Hq), B, 1, Hq, D);
  }
}

}  // namespace maxctx::parallel

#include "maxctx/parallel/decode_attention.h"

#include <algorithm>

#include "maxctx/core/check.h"
#include "maxctx/core/trace.h"

namespace maxctx::parallel {

PrefillAttention::PrefillAttention(const kernels::Kernels& kernels, const Communicator& ca,
                                   DecodeSharding sharding, KvCache& cache)
    : kernels_(kernels),
      ca_(ca),
      sharding_(sharding),
      cache_(cache),
      attention_(ca, kernels),
      prefix_(kernels, ca, cache) {}

int64_t PrefillAttention::held_bytes() const {
  int64_t bytes = attention_.held_bytes() + prefix_.held_bytes();
  for (const Tensor* t : {&lse_, &merged_, &send_, &recv_}) {
    if (!t->view().empty()) bytes += static_cast<int64_t>(t->view().bytes());
  }
  return bytes + static_cast<int64_t>(send_ids_.size() + recv_ids_.size()) *
                     static_cast<int64_t>(sizeof(int32_t));
}

int64_t PrefillAttention::staging_bytes(int64_t ca, const AttentionOperands& x, int64_t prefix_rows,
                                        bool int8_cache, bool batch_sharded) {
  // The all-gather plan's forward buffers (AllGatherContextAttention::staging_bytes less the
  // gradients'): send/recv of K | V, the gathered K and V, and their ids.
  const int64_t element = static_cast<int64_t>(dtype_size(x.dtype));
  const int64_t kv = x.kv_numel();
  const int64_t id = sizeof(int32_t), f32 = sizeof(float);
  int64_t bytes = (2 * kv + ca * 2 * kv + 2 * ca * kv) * element +
                  (2 * ca + 2 + 2 * ca) * x.tokens() * id + x.batch * x.heads_q * x.seq * f32;
  if (batch_sharded) bytes += (2 * kv + ca * 2 * kv) * element + (2 + 2 * ca) * x.tokens() * id;
  if (prefix_rows > 0) {
    bytes += prefix_rows * x.heads_q * x.head_dim * f32 +  // merged_
             PrefixAttention::staging_bytes(ca, prefix_rows, x.heads_q, x.heads_kv, x.head_dim,
                                            x.dtype, int8_cache);
  }
  return bytes;
}

void PrefillAttention::forward(int64_t layer, TensorView out_view, TensorView, TensorView q_view,
                               TensorView k_view, TensorView v_view, const TokenLayout& tokens,
                               const kernels::AttentionParams& dims) {
  const int64_t B = tokens.batch, S = tokens.seq;
  kernels_.reserve(lse_, B * dims.heads_q * S);
  const TensorView lse = lse_.view().elements(0, B * dims.heads_q * S);
  if (first_row_ == 0) {
    attention_.forward(out_view, lse, q_view, k_view, v_view, tokens, dims);
  } else {
    // A later chunk of one prompt: its attention to itself and to the earlier chunks' rows on
    // every rank, merged in an f32 accumulator that out gets once.
    kernels_.reserve(merged_, out_view.numel());
    const TensorView merged = merged_.view().elements(0, out_view.numel());
    attention_.forward(merged, lse, q_view, k_view, v_view, tokens, dims);
    prefix_.merge_into(merged, lse, layer, first_slot_, first_row_, q_view, tokens, dims);
    kernels_.copy(out_view, merged);
  }
  const int64_t row_elements = dims.heads_kv * dims.head_dim;
  if (sharding_ == DecodeSharding::kBatch && ca_.size() > 1) {
    MAXCTX_CHECK(first_slot_ == 0 && first_row_ == 0,
                 "a batch-sharded prefill runs every slot at once");
    store_batch_sharded(layer, k_view, v_view, tokens, row_elements);
    return;
  }
  MAXCTX_CHECK(
      first_slot_ + B <= cache_.shape().slots && first_row_ + S <= cache_.shape().prefill_rows,
      "prefill of (B={}, S={}) from slot {} row {} for a cache of {} slots x {} prefill "
      "rows",
      B, S, first_slot_, first_row_, cache_.shape().slots, cache_.shape().prefill_rows);
  for (int64_t b = 0; b < B; ++b) {
    const int64_t slot = first_slot_ + b;
    if (layer == 0) {
      cache_.set_rows(slot, first_row_, S, tokens.positions_on_host() + b * S,
                      tokens.segment_ids_on_host() + b * S);
    }
    const int64_t run = S * row_elements;
    cache_.store(layer, slot, first_row_, S, k_view.elements(b * run, run),
                 v_view.elements(b * run, run));
  }
}

void PrefillAttention::store_batch_sharded(int64_t layer, TensorView k, TensorView v,
                                           const TokenLayout& tokens, int64_t row_elements) {
  const int ca = ca_.size();
  const int64_t B = tokens.batch, S = tokens.seq;
  const int64_t slots = cache_.shape().slots;
  MAXCTX_CHECK(B == slots * ca && ca * S <= cache_.shape().prefill_rows,
               "batch-sharded prefill of (B={}, S={}) over {} ranks for a cache of {} slots x {} "
               "prefill rows",
               B, S, ca, slots, cache_.shape().prefill_rows);
  const int64_t kv_numel = B * S * row_elements;
  kernels_.reserve(send_, 2 * kv_numel, k.dtype());
  kernels_.reserve(recv_, ca * 2 * kv_numel, k.dtype());
  const TensorView send = send_.view().elements(0, 2 * kv_numel);
  const TensorView recv = recv_.view().elements(0, ca * 2 * kv_numel);
  kernels_.copy(send.elements(0, kv_numel), k);
  kernels_.copy(send.elements(kv_numel, kv_numel), v);
  ca_.all_gather(send, recv, kernels_.stream());
  if (layer == 0) {
    send_ids_.resize(static_cast<size_t>(2 * B * S));
    std::copy_n(tokens.positions_on_host(), B * S, send_ids_.begin());
    std::copy_n(tokens.segment_ids_on_host(), B * S, send_ids_.begin() + B * S);
    recv_ids_.resize(static_cast<size_t>(ca * 2 * B * S));
    ca_.all_gather(std::span<const int32_t>(send_ids_), std::span<int32_t>(recv_ids_));
  }
  // Rank c sent columns [c·S, (c+1)·S) of every slot; this rank keeps slots
  // [rank·slots, (rank+1)·slots) whole.
  for (int64_t j = 0; j < slots; ++j) {
    const int64_t g = ca_.rank() * slots + j;
    for (int c = 0; c < ca; ++c) {
      const int64_t from = c * 2 * kv_numel + g * S * row_elements;
      if (layer == 0) {
        const int32_t* ids = recv_ids_.data() + c * 2 * B * S;
        cache_.set_rows(j, c * S, S, ids + g * S, ids + B * S + g * S);
      }
      cache_.store(layer, j, c * S, S, recv.elements(from, S * row_elements),
                   recv.elements(from + kv_numel, S * row_elements));
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
  const int64_t B = tokens.batch;
  const int64_t Hq = dims.heads_q, D = dims.head_dim;
  const int64_t row_elements = dims.heads_kv * D;
  MAXCTX_CHECK(tokens.seq == 1 && B == static_cast<int64_t>(rows_.size()),
               "decode attention takes one token per slot ({} slots), got (B={}, S={}); call "
               "begin_step first",
               rows_.size(), B, tokens.seq);
  for (int64_t b = 0; b < B; ++b) {
    if (rows_[b] >= 0) {
      cache_.store(layer, b, rows_[b], 1, k_view.elements(b * row_elements, row_elements),
                   v_view.elements(b * row_elements, row_elements));
    }
  }
  const KvView kv = cache_.view(layer);
  if (q_seg_.size() != B) q_seg_.upload(kernels_, std::vector<int32_t>(static_cast<size_t>(B), 1));
  kernels::AttentionParams p = dims;
  p.batch = B;
  p.seq_q = 1;
  p.seq_k = kv.rows;
  const int ca = ca_.size();
  const bool merge = sharding_ == DecodeSharding::kSequence && ca > 1;
  const int64_t out_numel = B * Hq * D;
  const int64_t part = out_numel + B * Hq;  // a rank's partial: out, then lse, in f32
  kernels_.reserve(lse_, B * Hq);
  if (merge) kernels_.reserve(partial_, part);
  const TensorView lse_view = lse_.view().elements(0, B * Hq);
  const TensorView o = merge ? partial_.view().elements(0, out_numel) : out_view;
  const TensorView lse = merge ? partial_.view().elements(out_numel, B * Hq) : lse_view;
  if (kv.quantized()) {
    kernels_.single_query_attention_int8(o, lse, q_view, kv.k, kv.k_scale, kv.v, kv.v_scale,
                                         tokens.positions, q_seg_.data(), kv.positions, kv.segments,
                                         p);
  } else {
    kernels_.single_query_attention(o, lse, q_view, kv.k, kv.v, tokens.positions, q_seg_.data(),
                                    kv.positions, kv.segments, p);
  }
  if (!merge) return;
  // The merge of the shards' partials: one all-gather over context_autoregressive, then LSE.
  const trace::Span span("decode_merge", trace::Category::kLayer);
  kernels_.reserve(gathered_, ca * part);
  const TensorView gathered = gathered_.view().elements(0, ca * part);
  ca_.all_gather(partial_.view().elements(0, part), gathered, kernels_.stream());
  // The merge runs in an f32 accumulator whatever out's dtype; out gets it once, at the end.
  kernels_.reserve(merged_, out_numel);
  const TensorView merged = merged_.view().elements(0, out_numel);
  kernels_.copy(merged, gathered.elements(0, out_numel));
  kernels_.copy(lse_view, gathered.elements(out_numel, B * Hq));
  for (int c = 1; c < ca; ++c) {
    const int64_t other = c * part;
    kernels_.attention_merge(merged, lse_view, merged, lse_view,
                             gathered.elements(other, out_numel),
                             gathered.elements(other + out_numel, B * Hq), B, 1, Hq, D);
  }
  kernels_.copy(out_view, merged);
}

}  // namespace maxctx::parallel

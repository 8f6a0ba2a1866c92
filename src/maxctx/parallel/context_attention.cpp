#include "maxctx/parallel/context_attention.h"

#include <algorithm>
#include <span>

#include "maxctx/core/trace.h"

namespace maxctx::parallel {
namespace {

// Message tags of the ring; a chunk's four parts never mix with one another.
constexpr int kTagKeysValues = 11;
constexpr int kTagIds = 12;
constexpr int kTagGradients = 13;

kernels::AttentionParams chunk_params(const TokenLayout& tokens,
                                      const kernels::AttentionParams& dims, int64_t seq_k) {
  kernels::AttentionParams p = dims;
  p.batch = tokens.batch;
  p.seq_q = tokens.seq;
  p.seq_k = seq_k;
  return p;
}

constexpr int64_t kIdBytes = sizeof(int32_t);

int64_t ids_bytes(const std::vector<int32_t>& ids) {
  return static_cast<int64_t>(ids.size()) * kIdBytes;
}

}  // namespace

// gather_keys: one all-gather of K | V, one of positions | segment ids; the backward gathers
// again and reduce-scatters dK | dV in f32.
void AllGatherContextAttention::add_forward_traffic(Traffic& traffic, const std::string& axis,
                                                    int64_t cp, const AttentionOperands& x) {
  const int64_t element = static_cast<int64_t>(dtype_size(x.dtype));
  traffic.add(axis, CollectiveKind::kAllGather, cp * 2 * x.kv_numel() * element);
  traffic.add(axis, CollectiveKind::kAllGather, cp * 2 * x.tokens() * kIdBytes);
}

void AllGatherContextAttention::add_backward_traffic(Traffic& traffic, const std::string& axis,
                                                     int64_t cp, const AttentionOperands& x) {
  add_forward_traffic(traffic, axis, cp, x);
  traffic.add(axis, CollectiveKind::kReduceScatter,
              cp * 2 * x.kv_numel() * static_cast<int64_t>(sizeof(float)));
}

int64_t AllGatherContextAttention::staging_bytes(int64_t cp, const AttentionOperands& x) {
  const int64_t element = static_cast<int64_t>(dtype_size(x.dtype));
  const int64_t kv = x.kv_numel();
  const int64_t f32 = sizeof(float);
  return (2 * kv + cp * 2 * kv) * element                  // send_, recv_
         + 2 * cp * kv * element                           // full_k_, full_v_
         + 2 * cp * kv * f32                               // full_dk_, full_dv_
         + (cp * 2 * kv + 2 * kv) * f32                    // grad_send_, grad_recv_
         + (2 * cp + 2 + 2 * cp) * x.tokens() * kIdBytes;  // full_pos_/seg_, send/recv_ids_
}

int64_t AllGatherContextAttention::held_bytes() const {
  int64_t bytes = 0;
  for (const Tensor* t :
       {&send_, &recv_, &grad_send_, &grad_recv_, &full_k_, &full_v_, &full_dk_, &full_dv_}) {
    if (!t->view().empty()) bytes += static_cast<int64_t>(t->view().bytes());
  }
  for (const auto* ids : {&full_pos_, &full_seg_, &send_ids_, &recv_ids_}) bytes += ids_bytes(*ids);
  return bytes;
}

// pass_chunk_along on each of cp - 1 steps (K | V and the ids, sent and received); the
// backward does the same, then sends its dK | dV accumulators on with every one of cp steps.
void RingContextAttention::add_forward_traffic(Traffic& traffic, const std::string& axis,
                                               int64_t cp, const AttentionOperands& x) {
  const int64_t kv_bytes = 2 * x.kv_numel() * static_cast<int64_t>(dtype_size(x.dtype));
  const int64_t id_bytes = 2 * x.tokens() * kIdBytes;
  for (CollectiveKind kind : {CollectiveKind::kIsend, CollectiveKind::kIrecv}) {
    traffic.add(axis, kind, kv_bytes, cp - 1);
    traffic.add(axis, kind, id_bytes, cp - 1);
  }
}

void RingContextAttention::add_backward_traffic(Traffic& traffic, const std::string& axis,
                                                int64_t cp, const AttentionOperands& x) {
  add_forward_traffic(traffic, axis, cp, x);
  traffic.add(axis, CollectiveKind::kSendRecv, 2 * 2 * x.kv_numel() * sizeof(float), cp);
}

int64_t RingContextAttention::staging_bytes(int64_t, const AttentionOperands& x) {
  const int64_t kv = x.kv_numel();
  const int64_t f32 = sizeof(float);
  const int64_t out = x.tokens() * x.heads_q * x.head_dim;
  return 2 * 2 * kv * static_cast<int64_t>(dtype_size(x.dtype))  // chunk_kv_
         + 2 * 2 * x.tokens() * kIdBytes                         // chunk_ids_
         + 2 * 2 * kv * f32                                      // chunk_grad_
         + 2 * out * f32                                         // merged_out_, partial_out_
         + x.batch * x.heads_q * x.seq * f32;                    // partial_lse_
}

int64_t RingContextAttention::held_bytes() const {
  int64_t bytes = 0;
  for (const Tensor* t : {&chunk_kv_[0], &chunk_kv_[1], &chunk_grad_[0], &chunk_grad_[1],
                          &merged_out_, &partial_out_, &partial_lse_}) {
    if (!t->view().empty()) bytes += static_cast<int64_t>(t->view().bytes());
  }
  return bytes + ids_bytes(chunk_ids_[0]) + ids_bytes(chunk_ids_[1]);
}

void AllGatherContextAttention::gather_keys(TensorView k, TensorView v, const TokenLayout& tokens) {
  const int64_t cp = context_.size();
  const int64_t B = tokens.batch, S = tokens.seq;
  const int64_t kv_numel = k.numel();
  const int64_t run = kv_numel / B;  // one sequence's rows of this rank: S·Hkv·D elements
  // One all-gather for K and V together, one for positions and segment ids.
  kernels_.reserve(send_, 2 * kv_numel, k.dtype());
  kernels_.reserve(recv_, cp * 2 * kv_numel, k.dtype());
  const TensorView send = send_.view().elements(0, 2 * kv_numel);
  const TensorView recv = recv_.view().elements(0, cp * 2 * kv_numel);
  kernels_.copy(send.elements(0, kv_numel), k);
  kernels_.copy(send.elements(kv_numel, kv_numel), v);
  context_.all_gather(send, recv, kernels_.stream());
  send_ids_.resize(2 * B * S);
  std::copy_n(tokens.positions_on_host(), B * S, send_ids_.begin());
  std::copy_n(tokens.segment_ids_on_host(), B * S, send_ids_.begin() + B * S);
  recv_ids_.resize(cp * 2 * B * S);
  context_.all_gather(std::span<const int32_t>(send_ids_), std::span<int32_t>(recv_ids_));

  kernels_.reserve(full_k_, cp * kv_numel, k.dtype());
  kernels_.reserve(full_v_, cp * kv_numel, k.dtype());
  full_pos_.resize(cp * B * S);
  full_seg_.resize(cp * B * S);
  for (int64_t c = 0; c < cp; ++c) {
    const TensorView from = recv.elements(c * 2 * kv_numel, 2 * kv_numel);
    const int32_t* ids = recv_ids_.data() + c * 2 * B * S;
    for (int64_t b = 0; b < B; ++b) {
      const int64_t dst_row = b * cp * S + c * S;  // sequence b, rank c's tokens
      kernels_.copy(full_k_.view().elements(dst_row * (run / S), run), from.elements(b * run, run));
      kernels_.copy(full_v_.view().elements(dst_row * (run / S), run),
                    from.elements(kv_numel + b * run, run));
      std::copy(ids + b * S, ids + (b + 1) * S, full_pos_.data() + dst_row);
      std::copy(ids + B * S + b * S, ids + B * S + (b + 1) * S, full_seg_.data() + dst_row);
    }
  }
  // The kernels read the gathered ids in the backend's memory.
  full_pos_device_.upload(kernels_, full_pos_);
  full_seg_device_.upload(kernels_, full_seg_);
}

void AllGatherContextAttention::forward(TensorView out, TensorView lse, TensorView q, TensorView k,
                                        TensorView v, const TokenLayout& tokens,
                                        const kernels::AttentionParams& dims) {
  gather_keys(k, v, tokens);
  const int64_t cp = context_.size();
  const int64_t full_numel = cp * k.numel();
  const kernels::AttentionParams p = chunk_params(tokens, dims, cp * tokens.seq);
  kernels_.attention_forward(out, lse, q, full_k_.view().elements(0, full_numel),
                             full_v_.view().elements(0, full_numel), tokens.positions,
                             tokens.segment_ids, full_pos_device_.data(), full_seg_device_.data(),
                             p, counted_stats(kernels_, stats_));
}

void AllGatherContextAttention::backward(TensorView dq, TensorView dk, TensorView dv,
                                         TensorView d_out, TensorView out, TensorView lse,
                                         TensorView q, TensorView k, TensorView v,
                                         const TokenLayout& tokens,
                                         const kernels::AttentionParams& dims) {
  gather_keys(k, v, tokens);
  const int64_t cp = context_.size();
  const int64_t B = tokens.batch, S = tokens.seq;
  const int64_t kv_numel = k.numel();
  const int64_t run = kv_numel / B;
  const int64_t full_numel = cp * kv_numel;
  kernels_.reserve(full_dk_, full_numel, DType::kF32);
  kernels_.reserve(full_dv_, full_numel, DType::kF32);
  const TensorView full_dk = full_dk_.view().elements(0, full_numel);
  const TensorView full_dv = full_dv_.view().elements(0, full_numel);
  kernels_.fill_zero(full_dk);
  kernels_.fill_zero(full_dv);
  kernels_.fill_zero(dq);
  const kernels::AttentionParams p = chunk_params(tokens, dims, cp * S);
  kernels_.attention_backward(
      dq, full_dk, full_dv, d_out, out, lse, q, full_k_.view().elements(0, full_numel),
      full_v_.view().elements(0, full_numel), tokens.positions, tokens.segment_ids,
      full_pos_device_.data(), full_seg_device_.data(), p, counted_stats(kernels_, stats_));
  // Every rank holds partial dK/dV for every rank's keys: sum them at their owners, in f32. The
  // blocks are [rank][dK | dV] so that one reduce-scatter delivers both.
  kernels_.reserve(grad_send_, cp * 2 * kv_numel, DType::kF32);
  kernels_.reserve(grad_recv_, 2 * kv_numel, DType::kF32);
  const TensorView send = grad_send_.view().elements(0, cp * 2 * kv_numel);
  const TensorView recv = grad_recv_.view().elements(0, 2 * kv_numel);
  for (int64_t c = 0; c < cp; ++c) {
    const TensorView block = send.elements(c * 2 * kv_numel, 2 * kv_numel);
    for (int64_t b = 0; b < B; ++b) {
      const int64_t src = (b * cp * S + c * S) * (run / S);
      kernels_.copy(block.elements(b * run, run), full_dk.elements(src, run));
      kernels_.copy(block.elements(kv_numel + b * run, run), full_dv.elements(src, run));
    }
  }
  context_.reduce_scatter(send, recv, kernels_.stream());
  kernels_.copy(dk, recv.elements(0, kv_numel));
  kernels_.copy(dv, recv.elements(kv_numel, kv_numel));
}

void RingContextAttention::load_own_chunk(TensorView k, TensorView v, const TokenLayout& tokens) {
  const int64_t n = tokens.batch * tokens.seq;
  kv_numel_ = k.numel();
  for (int slot = 0; slot < 2; ++slot) {
    kernels_.reserve(chunk_kv_[slot], 2 * kv_numel_, k.dtype());
    chunk_ids_[slot].resize(2 * n);
  }
  kernels_.copy(chunk_kv(0).elements(0, kv_numel_), k);
  kernels_.copy(chunk_kv(0).elements(kv_numel_, kv_numel_), v);
  std::copy_n(tokens.positions_on_host(), n, chunk_ids_[0].begin());
  std::copy_n(tokens.segment_ids_on_host(), n, chunk_ids_[0].begin() + n);
}

std::vector<Request> RingContextAttention::pass_chunk_along(int cur) {
  const int cp = context_.size();
  const int next = (context_.rank() + 1) % cp;
  const int prev = (context_.rank() + cp - 1) % cp;
  std::vector<Request> in_flight;
  in_flight.push_back(context_.isend(chunk_kv(cur), next, kTagKeysValues, kernels_.stream()));
  in_flight.push_back(context_.isend(std::span<const int32_t>(chunk_ids_[cur]), next, kTagIds));
  in_flight.push_back(context_.irecv(chunk_kv(1 - cur), prev, kTagKeysValues, kernels_.stream()));
  in_flight.push_back(context_.irecv(std::span<int32_t>(chunk_ids_[1 - cur]), prev, kTagIds));
  return in_flight;
}

void RingContextAttention::forward(TensorView out, TensorView lse, TensorView q, TensorView k,
                                   TensorView v, const TokenLayout& tokens,
                                   const kernels::AttentionParams& dims) {
  const int cp = context_.size();
  const int64_t B = tokens.batch, S = tokens.seq;
  load_own_chunk(k, v, tokens);
  // The merge runs in an f32 accumulator whatever out's dtype; out gets it once, at the end.
  kernels_.reserve(merged_out_, out.numel(), DType::kF32);
  const TensorView merged = merged_out_.view().elements(0, out.numel());
  kernels_.reserve(partial_out_, out.numel(), DType::kF32);
  kernels_.reserve(partial_lse_, lse.numel(), DType::kF32);
  const TensorView partial_out = partial_out_.view().elements(0, out.numel());
  const TensorView partial_lse = partial_lse_.view().elements(0, lse.numel());
  const kernels::AttentionParams p = chunk_params(tokens, dims, S);

  for (int step = 0; step < cp; ++step) {
    const trace::Span span("ring_step", trace::Category::kLayer,
                           trace::enabled() ? trace::numbered("ring step", step) : nullptr);
    const int cur = step % 2;
    // Post the hand-off of the current chunk before computing with it.
    std::vector<Request> in_flight = step + 1 < cp ? pass_chunk_along(cur) : std::vector<Request>{};
    const TensorView chunk = chunk_kv(cur);
    chunk_ids_device_.upload(kernels_, chunk_ids_[cur]);  // complete: received last step
    const int32_t* chunk_pos = chunk_ids_device_.data();
    kernels_.attention_forward(step == 0 ? merged : partial_out, step == 0 ? lse : partial_lse, q,
                               chunk.elements(0, kv_numel_), chunk.elements(kv_numel_, kv_numel_),
                               tokens.positions, tokens.segment_ids, chunk_pos, chunk_pos + B * S,
                               p, counted_stats(kernels_, stats_));
    if (step > 0) {
      kernels_.attention_merge(merged, lse, merged, lse, partial_out, partial_lse, B, S,
                               dims.heads_q, dims.head_dim);
    }
    wait_all(in_flight);
  }
  kernels_.copy(out, merged);
}

void RingContextAttention::backward(TensorView dq, TensorView dk, TensorView dv, TensorView d_out,
                                    TensorView out, TensorView lse, TensorView q, TensorView k,
                                    TensorView v, const TokenLayout& tokens,
                                    const kernels::AttentionParams& dims) {
  const int cp = context_.size();
  const int next = (context_.rank() + 1) % cp;
  const int prev = (context_.rank() + cp - 1) % cp;
  const int64_t B = tokens.batch, S = tokens.seq;
  load_own_chunk(k, v, tokens);
  for (int slot = 0; slot < 2; ++slot) {
    kernels_.reserve(chunk_grad_[slot], 2 * kv_numel_, DType::kF32);
  }
  kernels_.fill_zero(chunk_grad(0));
  const kernels::AttentionParams p = chunk_params(tokens, dims, S);
  kernels_.fill_zero(dq);

  // At step i this rank holds the chunk of rank (r − i) with the dK/dV its earlier holders
  // accumulated; after the last step one more hop takes every chunk's gradients home.
  for (int step = 0; step < cp; ++step) {
    const trace::Span span("ring_step", trace::Category::kLayer,
                           trace::enabled() ? trace::numbered("ring step", step) : nullptr);
    const int cur = step % 2;
    std::vector<Request> in_flight = step + 1 < cp ? pass_chunk_along(cur) : std::vector<Request>{};
    const TensorView chunk = chunk_kv(cur);
    const TensorView grad = chunk_grad(cur);
    chunk_ids_device_.upload(kernels_, chunk_ids_[cur]);  // complete: received last step
    const int32_t* chunk_pos = chunk_ids_device_.data();
    kernels_.attention_backward(
        dq, grad.elements(0, kv_numel_), grad.elements(kv_numel_, kv_numel_), d_out, out, lse, q,
        chunk.elements(0, kv_numel_), chunk.elements(kv_numel_, kv_numel_), tokens.positions,
        tokens.segment_ids, chunk_pos, chunk_pos + B * S, p, counted_stats(kernels_, stats_));
    wait_all(in_flight);
    // The gradients can only leave once computed.
    context_.send_recv(grad, next, chunk_grad(1 - cur), prev, kTagGradients, kernels_.stream());
  }
  const TensorView home = chunk_grad(cp % 2);
  kernels_.copy(dk, home.elements(0, kv_numel_));
  kernels_.copy(dv, home.elements(kv_numel_, kv_numel_));
}

}  // namespace maxctx::parallel

#include "maxctx/parallel/context_attention.h"

#include <algorithm>
#include <span>

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

}  // namespace

void AllGatherContextAttention::gather_keys(const float* k, const float* v,
                                            const TokenLayout& tokens,
                                            const kernels::AttentionParams& dims) {
  const int64_t cp = context_.size();
  const int64_t B = tokens.batch, S = tokens.seq;
  const int64_t row = dims.heads_kv * dims.head_dim;
  const int64_t kv_numel = B * S * row;
  // One all-gather for K and V together, one for positions and segment ids.
  send_.resize(2 * kv_numel);
  std::copy(k, k + kv_numel, send_.begin());
  std::copy(v, v + kv_numel, send_.begin() + kv_numel);
  recv_.resize(cp * 2 * kv_numel);
  context_.all_gather(std::span<const float>(send_), std::span<float>(recv_));
  send_ids_.resize(2 * B * S);
  std::copy(tokens.positions, tokens.positions + B * S, send_ids_.begin());
  std::copy(tokens.segment_ids, tokens.segment_ids + B * S, send_ids_.begin() + B * S);
  recv_ids_.resize(cp * 2 * B * S);
  context_.all_gather(std::span<const int32_t>(send_ids_), std::span<int32_t>(recv_ids_));

  full_k_.resize(cp * kv_numel);
  full_v_.resize(cp * kv_numel);
  full_pos_.resize(cp * B * S);
  full_seg_.resize(cp * B * S);
  for (int64_t c = 0; c < cp; ++c) {
    const float* from = recv_.data() + c * 2 * kv_numel;
    const int32_t* ids = recv_ids_.data() + c * 2 * B * S;
    for (int64_t b = 0; b < B; ++b) {
      const int64_t dst_row = b * cp * S + c * S;  // sequence b, rank c's tokens
      std::copy(from + b * S * row, from + (b + 1) * S * row, full_k_.data() + dst_row * row);
      std::copy(from + kv_numel + b * S * row, from + kv_numel + (b + 1) * S * row,
                full_v_.data() + dst_row * row);
      std::copy(ids + b * S, ids + (b + 1) * S, full_pos_.data() + dst_row);
      std::copy(ids + B * S + b * S, ids + B * S + (b + 1) * S, full_seg_.data() + dst_row);
    }
  }
}

void AllGatherContextAttention::forward(float* out, float* lse, const float* q, const float* k,
                                        const float* v, const TokenLayout& tokens,
                                        const kernels::AttentionParams& dims) {
  gather_keys(k, v, tokens, dims);
  const int64_t cp = context_.size();
  const kernels::AttentionParams p = chunk_params(tokens, dims, cp * tokens.seq);
  const kernels::AttentionViews views(p, out, lse, q, full_k_.data(), full_v_.data());
  kernels_.attention_forward(views.out, views.lse, views.q, views.k, views.v, tokens.positions,
                             tokens.segment_ids, full_pos_.data(), full_seg_.data(), p, &stats_);
}

void AllGatherContextAttention::backward(float* dq, float* dk, float* dv, const float* d_out,
                                         const float* out, const float* lse, const float* q,
                                         const float* k, const float* v, const TokenLayout& tokens,
                                         const kernels::AttentionParams& dims) {
  gather_keys(k, v, tokens, dims);
  const int64_t cp = context_.size();
  const int64_t B = tokens.batch, S = tokens.seq;
  const int64_t row = dims.heads_kv * dims.head_dim;
  const int64_t kv_numel = B * S * row;
  full_dk_.assign(cp * kv_numel, 0.0f);
  full_dv_.assign(cp * kv_numel, 0.0f);
  const kernels::AttentionParams p = chunk_params(tokens, dims, cp * S);
  const kernels::AttentionViews views(p, out, lse, q, full_k_.data(), full_v_.data());
  const kernels::AttentionViews grads(p, d_out, lse, dq, full_dk_.data(), full_dv_.data());
  kernels_.fill_zero(grads.q);
  kernels_.attention_backward(grads.q, grads.k, grads.v, grads.out, views.out, views.lse, views.q,
                              views.k, views.v, tokens.positions, tokens.segment_ids,
                              full_pos_.data(), full_seg_.data(), p, &stats_);
  // Every rank holds partial dK/dV for every rank's keys: sum them at their owners. The blocks
  // are [rank][dK | dV] so that one reduce-scatter delivers both.
  send_.resize(cp * 2 * kv_numel);
  for (int64_t c = 0; c < cp; ++c) {
    float* block = send_.data() + c * 2 * kv_numel;
    for (int64_t b = 0; b < B; ++b) {
      const int64_t src_row = b * cp * S + c * S;
      std::copy(full_dk_.data() + src_row * row, full_dk_.data() + (src_row + S) * row,
                block + b * S * row);
      std::copy(full_dv_.data() + src_row * row, full_dv_.data() + (src_row + S) * row,
                block + kv_numel + b * S * row);
    }
  }
  recv_.resize(2 * kv_numel);
  context_.reduce_scatter(std::span<const float>(send_), std::span<float>(recv_));
  std::copy(recv_.begin(), recv_.begin() + kv_numel, dk);
  std::copy(recv_.begin() + kv_numel, recv_.end(), dv);
}

void RingContextAttention::load_own_chunk(const float* k, const float* v, const TokenLayout& tokens,
                                          int64_t kv_numel) {
  const int64_t n = tokens.batch * tokens.seq;
  for (int slot = 0; slot < 2; ++slot) {
    chunk_kv_[slot].resize(2 * kv_numel);
    chunk_ids_[slot].resize(2 * n);
  }
  std::copy(k, k + kv_numel, chunk_kv_[0].begin());
  std::copy(v, v + kv_numel, chunk_kv_[0].begin() + kv_numel);
  std::copy(tokens.positions, tokens.positions + n, chunk_ids_[0].begin());
  std::copy(tokens.segment_ids, tokens.segment_ids + n, chunk_ids_[0].begin() + n);
}

std::vector<Request> RingContextAttention::pass_chunk_along(int cur) {
  const int cp = context_.size();
  const int next = (context_.rank() + 1) % cp;
  const int prev = (context_.rank() + cp - 1) % cp;
  std::vector<Request> in_flight;
  in_flight.push_back(context_.isend(std::span<const float>(chunk_kv_[cur]), next, kTagKeysValues));
  in_flight.push_back(context_.isend(std::span<const int32_t>(chunk_ids_[cur]), next, kTagIds));
  in_flight.push_back(context_.irecv(std::span<float>(chunk_kv_[1 - cur]), prev, kTagKeysValues));
  in_flight.push_back(context_.irecv(std::span<int32_t>(chunk_ids_[1 - cur]), prev, kTagIds));
  return in_flight;
}

void RingContextAttention::forward(float* out, float* lse, const float* q, const float* k,
                                   const float* v, const TokenLayout& tokens,
                                   const kernels::AttentionParams& dims) {
  const int cp = context_.size();
  const int64_t B = tokens.batch, S = tokens.seq;
  const int64_t kv_numel = B * S * dims.heads_kv * dims.head_dim;
  const int64_t out_numel = B * S * dims.heads_q * dims.head_dim;
  const int64_t lse_numel = B * dims.heads_q * S;
  load_own_chunk(k, v, tokens, kv_numel);
  partial_out_.resize(out_numel);
  partial_lse_.resize(lse_numel);
  const kernels::AttentionParams p = chunk_params(tokens, dims, S);

  for (int step = 0; step < cp; ++step) {
    const int cur = step % 2;
    // Post the hand-off of the current chunk before computing with it.
    std::vector<Request> in_flight = step + 1 < cp ? pass_chunk_along(cur) : std::vector<Request>{};
    const float* chunk_k = chunk_kv_[cur].data();
    const int32_t* chunk_pos = chunk_ids_[cur].data();
    float* step_out = step == 0 ? out : partial_out_.data();
    float* step_lse = step == 0 ? lse : partial_lse_.data();
    const kernels::AttentionViews views(p, step_out, step_lse, q, chunk_k, chunk_k + kv_numel);
    kernels_.attention_forward(views.out, views.lse, views.q, views.k, views.v, tokens.positions,
                               tokens.segment_ids, chunk_pos, chunk_pos + B * S, p, &stats_);
    if (step > 0) {
      const TensorView merged_out = TensorView::of(out, views.out.numel());
      const TensorView merged_lse = TensorView::of(lse, views.lse.numel());
      kernels_.attention_merge(merged_out, merged_lse, merged_out, merged_lse, views.out, views.lse,
                               B, S, dims.heads_q, dims.head_dim);
    }
    wait_all(in_flight);
  }
}

void RingContextAttention::backward(float* dq, float* dk, float* dv, const float* d_out,
                                    const float* out, const float* lse, const float* q,
                                    const float* k, const float* v, const TokenLayout& tokens,
                                    const kernels::AttentionParams& dims) {
  const int cp = context_.size();
  const int next = (context_.rank() + 1) % cp;
  const int prev = (context_.rank() + cp - 1) % cp;
  const int64_t B = tokens.batch, S = tokens.seq;
  const int64_t kv_numel = B * S * dims.heads_kv * dims.head_dim;
  load_own_chunk(k, v, tokens, kv_numel);
  for (int slot = 0; slot < 2; ++slot) chunk_grad_[slot].resize(2 * kv_numel);
  std::fill(chunk_grad_[0].begin(), chunk_grad_[0].end(), 0.0f);
  const kernels::AttentionParams p = chunk_params(tokens, dims, S);
  kernels_.fill_zero(TensorView::of(dq, B * S * dims.heads_q * dims.head_dim));

  // At step i this rank holds the chunk of rank (r − i) with the dK/dV its earlier holders
  // accumulated; after the last step one more hop takes every chunk's gradients home.
  for (int step = 0; step < cp; ++step) {
    const int cur = step % 2;
    std::vector<Request> in_flight = step + 1 < cp ? pass_chunk_along(cur) : std::vector<Request>{};
    const float* chunk_k = chunk_kv_[cur].data();
    const int32_t* chunk_pos = chunk_ids_[cur].data();
    float* chunk_dk = chunk_grad_[cur].data();
    const kernels::AttentionViews views(p, out, lse, q, chunk_k, chunk_k + kv_numel);
    const kernels::AttentionViews grads(p, d_out, lse, dq, chunk_dk, chunk_dk + kv_numel);
    kernels_.attention_backward(grads.q, grads.k, grads.v, grads.out, views.out, views.lse, views.q,
                                views.k, views.v, tokens.positions, tokens.segment_ids, chunk_pos,
                                chunk_pos + B * S, p, &stats_);
    wait_all(in_flight);
    // The gradients can only leave once computed.
    context_.send_recv(std::span<const float>(chunk_grad_[cur]), next,
                       std::span<float>(chunk_grad_[1 - cur]), prev, kTagGradients);
  }
  const std::vector<float>& home = chunk_grad_[cp % 2];
  std::copy(home.begin(), home.begin() + kv_numel, dk);
  std::copy(home.begin() + kv_numel, home.end(), dv);
}

}  // namespace maxctx::parallel

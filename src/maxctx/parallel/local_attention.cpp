#include "maxctx/parallel/local_attention.h"

#include <algorithm>

#include "maxctx/kernels/cpu/attention.h"

namespace maxctx::parallel {
namespace {

kernels::AttentionParams self_attention_params(const TokenLayout& tokens,
                                               const kernels::AttentionParams& dims) {
  kernels::AttentionParams p = dims;
  p.batch = tokens.batch;
  p.seq_q = tokens.seq;
  p.seq_k = tokens.seq;
  return p;
}

}  // namespace

void LocalAttention::forward(float* out, float* lse, const float* q, const float* k, const float* v,
                             const TokenLayout& tokens, const kernels::AttentionParams& dims) {
  kernels::cpu::attention_forward(out, lse, q, k, v, tokens.positions, tokens.segment_ids,
                                  tokens.positions, tokens.segment_ids,
                                  self_attention_params(tokens, dims), &stats_);
}

void LocalAttention::backward(float* dq, float* dk, float* dv, const float* d_out, const float* out,
                              const float* lse, const float* q, const float* k, const float* v,
                              const TokenLayout& tokens, const kernels::AttentionParams& dims) {
  const kernels::AttentionParams p = self_attention_params(tokens, dims);
  std::fill(dq, dq + p.batch * p.seq_q * p.heads_q * p.head_dim, 0.0f);
  std::fill(dk, dk + p.batch * p.seq_k * p.heads_kv * p.head_dim, 0.0f);
  std::fill(dv, dv + p.batch * p.seq_k * p.heads_kv * p.head_dim, 0.0f);
  kernels::cpu::attention_backward(dq, dk, dv, d_out, out, lse, q, k, v, tokens.positions,
                                   tokens.segment_ids, tokens.positions, tokens.segment_ids, p,
                                   &stats_);
}

}  // namespace maxctx::parallel

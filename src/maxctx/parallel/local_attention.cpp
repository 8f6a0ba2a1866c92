#include "maxctx/parallel/local_attention.h"

#include <algorithm>

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
  const kernels::AttentionParams p = self_attention_params(tokens, dims);
  const kernels::AttentionViews views(p, out, lse, q, k, v);
  kernels_.attention_forward(views.out, views.lse, views.q, views.k, views.v, tokens.positions,
                             tokens.segment_ids, tokens.positions, tokens.segment_ids, p, &stats_);
}

void LocalAttention::backward(float* dq, float* dk, float* dv, const float* d_out, const float* out,
                              const float* lse, const float* q, const float* k, const float* v,
                              const TokenLayout& tokens, const kernels::AttentionParams& dims) {
  const kernels::AttentionParams p = self_attention_params(tokens, dims);
  const kernels::AttentionViews views(p, out, lse, q, k, v);
  const kernels::AttentionViews grads(p, d_out, lse, dq, dk, dv);
  kernels_.fill_zero(grads.q);
  kernels_.fill_zero(grads.k);
  kernels_.fill_zero(grads.v);
  kernels_.attention_backward(grads.q, grads.k, grads.v, grads.out, views.out, views.lse, views.q,
                              views.k, views.v, tokens.positions, tokens.segment_ids,
                              tokens.positions, tokens.segment_ids, p, &stats_);
}

}  // namespace maxctx::parallel

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

void LocalAttention::forward(TensorView out, TensorView lse, TensorView q, TensorView k,
                             TensorView v, const TokenLayout& tokens,
                             const kernels::AttentionParams& dims) {
  const kernels::AttentionParams p = self_attention_params(tokens, dims);
  kernels_.attention_forward(out, lse, q, k, v, tokens.positions, tokens.segment_ids,
                             tokens.positions, tokens.segment_ids, p,
                             counted_stats(kernels_, stats_));
}

void LocalAttention::backward(TensorView dq, TensorView dk, TensorView dv, TensorView d_out,
                              TensorView out, TensorView lse, TensorView q, TensorView k,
                              TensorView v, const TokenLayout& tokens,
                              const kernels::AttentionParams& dims) {
  const kernels::AttentionParams p = self_attention_params(tokens, dims);
  kernels_.fill_zero(dq);
  kernels_.fill_zero(dk);
  kernels_.fill_zero(dv);
  kernels_.attention_backward(dq, dk, dv, d_out, out, lse, q, k, v, tokens.positions,
                              tokens.segment_ids, tokens.positions, tokens.segment_ids, p,
                              counted_stats(kernels_, stats_));
}

}  // namespace maxctx::parallel

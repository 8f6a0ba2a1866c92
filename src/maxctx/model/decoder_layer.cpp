#include "maxctx/model/decoder_layer.h"

#include "maxctx/core/check.h"

namespace maxctx::model {
namespace {

// The first N·cols elements of a buffer sized for more, as (N, cols).
TensorView leading(TensorView buffer, int64_t N, int64_t cols) {
  return buffer.reshaped({buffer.numel()}).rows(0, N * cols).reshaped({N, cols});
}

// Which steps of the layer run: all of them in a forward; in a recomputation what the remat
// policy did not keep. The norms and SwiGLU always run.
struct LayerSteps {
  bool qkv = true;        // q, k, v projections and RoPE
  bool attention = true;  // attention output and lse
  bool out_proj = true;   // o_proj, its tensor sum, the residual add into x_mid
  bool mlp_in = true;     // gate and up
  bool down = true;       // down_proj, its tensor sum, the residual add into x_out
};

// The attention projections of a layer whose weights are this rank's rows (the plan's
// attention_rows_split): each output assembled from every rank's columns.
void project_split_rows(const DecoderLayerPlan& plan, DecoderLayerBuffers& b, TensorView in,
                        std::initializer_list<std::pair<const Linear*, TensorView>> outs) {
  const kernels::Kernels& k = *plan.kernels;
  MAXCTX_CHECK(b.split_scratch != nullptr, "split attention projections need scratch buffers");
  if (plan.row_split != nullptr) {  // every rank holds the same tokens
    for (const auto& [w, out] : outs) {
      project_split(k, b.int8_rows, *b.split_scratch, *plan.row_split, in, *w, out);
    }
    return;
  }
  MAXCTX_CHECK(plan.token_split != nullptr && b.split_inputs != nullptr,
               "split attention projections over ranks holding other tokens need a token split");
  const int64_t ranks = plan.token_split->part().ranks;
  const int64_t N = in.shape()[0], in_dim = in.numel() / N;
  k.reserve(*b.split_inputs, ranks * N * in_dim, in.dtype());
  const TensorView all = leading(b.split_inputs->view(), ranks * N, in_dim);
  plan.token_split->gather_inputs(all, in.reshaped({N, in_dim}));
  for (const auto& [w, out] : outs) {
    k.reserve(*b.split_scratch, ranks * N * w->out_dim, out.dtype());
    const TensorView mine = leading(b.split_scratch->view(), ranks * N, w->out_dim);
    project(k, b.int8_rows, all, {{w, mine}});
    plan.token_split->return_outputs(out.reshaped({N, out.numel() / N}), mine);
  }
}

void attention_block_forward(const LlamaConfig& c, int64_t layer, const DecoderLayerWeights& w,
                             const LayerInputs& in, const DecoderLayerPlan& plan,
                             const LayerSteps& steps, TensorView x_in, TensorView x_mid,
                             DecoderLayerBuffers& b) {
  const kernels::Kernels& k = *plan.kernels;
  k.rmsnorm_forward(b.attn_norm_out, b.attn_norm_rstd, x_in, w.attn_norm, c.norm_eps);
  if (steps.qkv && plan.attention_rows_split) {
    project_split_rows(plan, b, b.attn_norm_out, {{&w.wq, b.q}, {&w.wk, b.k}, {&w.wv, b.v}});
  } else if (steps.qkv) {
    project(k, b.int8_rows, b.attn_norm_out, {{&w.wq, b.q}, {&w.wk, b.k}, {&w.wv, b.v}});
  }
  if (steps.qkv) {
    k.rope_forward(b.q, b.q, in.rope_cos, in.rope_sin);
    k.rope_forward(b.k, b.k, in.rope_cos, in.rope_sin);
  }
  if (steps.attention) {
    plan.attention->forward(layer, b.attn_out, b.lse, b.q, b.k, b.v, in.tokens, in.dims);
  }
  if (!steps.out_proj) return;
  // o_proj is row-parallel: each tensor rank holds a partial sum of the output.
  if (plan.attention_rows_split) {
    project_split_rows(plan, b, b.attn_out, {{&w.wo, b.proj}});
  } else {
    project(k, b.int8_rows, b.attn_out, {{&w.wo, b.proj}});
  }
  plan.tensor->all_reduce_sum(b.proj);
  k.add(x_mid, x_in, b.proj);
}

void mlp_block_forward(const LlamaConfig& c, const DecoderLayerWeights& w,
                       const parallel::TokenLayout& tokens, const DecoderLayerPlan& plan,
                       const LayerSteps& steps, TensorView x_mid, TensorView x_out,
                       DecoderLayerBuffers& b) {
  const kernels::Kernels& k = *plan.kernels;
  k.rmsnorm_forward(b.mlp_norm_out, b.mlp_norm_rstd, x_mid, w.mlp_norm, c.norm_eps);
  if (c.moe) {
    // Every rank runs its tokens through all experts (a row split's ranks hold the same tokens
    // and compute the same result), those of other expert ranks through plan.experts.
    MAXCTX_CHECK(b.moe != nullptr, "a mixture of experts needs its buffers");
    // Its routing and expert rows are kept per layer by every remat policy: a recomputation
    // (no `down` step) redoes only the norm above, which the backward reads as the experts' input.
    if (!steps.down) return;
    moe_forward(k, c, w.moe, tokens.batch, tokens.seq, b.mlp_norm_out, b.proj, *b.moe,
                plan.sequence, plan.experts, plan.chunks);
    plan.tensor->all_reduce_sum(b.proj);  // the experts' w2 is row-parallel like down_proj
  } else if (plan.row_split != nullptr) {
    // This rank's hidden units (gate and up hold (N, Fr)), gathered; then its output rows.
    MAXCTX_CHECK(plan.mlp_part != nullptr && b.split_scratch != nullptr && b.split_hidden,
                 "a row split needs this rank's MLP rows and scratch buffers");
    MAXCTX_CHECK(steps.mlp_in && steps.down, "a row split runs the whole MLP (inference)");
    const MlpRowsPart& part = *plan.mlp_part;
    const int64_t N = x_mid.shape()[0];
    const int64_t Fr = part.w_gate.out_dim;
    const TensorView gate = leading(b.gate, N, Fr);
    const TensorView up = leading(b.up, N, Fr);
    project(k, b.int8_rows, b.mlp_norm_out, {{&part.w_gate, gate}, {&part.w_up, up}});
    k.reserve(*b.split_hidden, N * Fr, b.swiglu_out.dtype());
    const TensorView hidden_part = leading(b.split_hidden->view(), N, Fr);
    k.swiglu_forward(hidden_part, gate, up);
    plan.row_split->gather(b.swiglu_out.reshaped({N, c.mlp_dim}), hidden_part);
    project_split(k, b.int8_rows, *b.split_scratch, *plan.row_split, b.swiglu_out, part.w_down,
                  b.proj);
  } else if (plan.mlp_rows_split) {
    // Ranks holding other tokens: the hidden units and the output through the token row split.
    MAXCTX_CHECK(steps.mlp_in && steps.down, "a row split runs the whole MLP (inference)");
    project_split_rows(plan, b, b.mlp_norm_out, {{&w.w_gate, b.gate}, {&w.w_up, b.up}});
    k.swiglu_forward(b.swiglu_out, b.gate, b.up);
    project_split_rows(plan, b, b.swiglu_out, {{&w.w_down, b.proj}});
  } else {
    if (steps.mlp_in) {
      project(k, b.int8_rows, b.mlp_norm_out, {{&w.w_gate, b.gate}, {&w.w_up, b.up}});
    }
    k.swiglu_forward(b.swiglu_out, b.gate, b.up);
    if (!steps.down) return;
    // down_proj is row-parallel like o_proj.
    project(k, b.int8_rows, b.swiglu_out, {{&w.w_down, b.proj}});
    plan.tensor->all_reduce_sum(b.proj);
  }
  k.add(x_out, x_mid, b.proj);
}

void check_plan(const DecoderLayerPlan& plan) {
  MAXCTX_CHECK(plan.kernels != nullptr && plan.attention != nullptr && plan.tensor != nullptr,
               "a decoder layer needs kernels, an attention and a tensor reducer");
}

}  // namespace

Linear linear_of(TensorView weight) {
  if (weight.empty()) return {};
  MAXCTX_CHECK_EQ(weight.shape().rank(), 2, "a projection is (out_dim, in_dim)");
  Linear l;
  l.weight = weight;
  l.out_dim = weight.shape()[0];
  l.in_dim = weight.shape()[1];
  return l;
}

void project(const kernels::Kernels& k, kernels::Int8Rows* int8_rows, TensorView in,
             std::initializer_list<std::pair<const Linear*, TensorView>> outs) {
  const Linear& first = *outs.begin()->first;
  if (first.i8 != nullptr) {
    MAXCTX_CHECK(int8_rows != nullptr, "int8 projections need an int8 row buffer");
    const int64_t N = in.numel() / first.in_dim;
    k.int8_quantize_rows(*int8_rows, in.reshaped({N, first.in_dim}));
    for (const auto& [w, out] : outs) k.int8_matmul_forward(out, *int8_rows, *w->i8);
    return;
  }
  // One token (batch-1 decode) is a matrix-vector product, which matmul_forward streams once.
  for (const auto& [w, out] : outs) k.matmul_forward(out, in, w->weight);
}

void project_split(const kernels::Kernels& k, kernels::Int8Rows* int8_rows, Tensor& scratch,
                   parallel::RowSplit& split, TensorView in, const Linear& part, TensorView out) {
  const int64_t N = in.shape()[0];
  k.reserve(scratch, N * part.out_dim, out.dtype());
  const TensorView mine = leading(scratch.view(), N, part.out_dim);
  project(k, int8_rows, in, {{&part, mine}});
  split.gather(out.reshaped({N, out.numel() / N}), mine);
}

void decoder_layer_forward(const LlamaConfig& c, int64_t layer, const DecoderLayerWeights& w,
                           const LayerInputs& in, const DecoderLayerPlan& plan, TensorView x_in,
                           TensorView x_mid, TensorView x_out, DecoderLayerBuffers& b) {
  check_plan(plan);
  const LayerSteps all;
  attention_block_forward(c, layer, w, in, plan, all, x_in, x_mid, b);
  mlp_block_forward(c, w, in.tokens, plan, all, x_mid, x_out, b);
}

void decoder_layer_recompute(const LlamaConfig& c, int64_t layer, const DecoderLayerWeights& w,
                             const LayerInputs& in, const DecoderLayerPlan& plan,
                             const RematPolicy& kept, TensorView x_in, TensorView x_mid,
                             DecoderLayerBuffers& b) {
  check_plan(plan);
  MAXCTX_CHECK(plan.row_split == nullptr, "training recomputes without a row split");
  if (kept.save_all) return;
  LayerSteps missing;
  missing.qkv = !kept.qkv;
  missing.attention = !kept.context;
  missing.out_proj = !kept.out_proj;
  missing.mlp_in = !kept.mlpwi;
  missing.down = false;
  attention_block_forward(c, layer, w, in, plan, missing, x_in, x_mid, b);
  mlp_block_forward(c, w, in.tokens, plan, missing, x_mid, TensorView(), b);
}

}  // namespace maxctx::model

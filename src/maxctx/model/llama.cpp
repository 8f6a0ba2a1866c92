#include "maxctx/model/llama.h"

#include <algorithm>

#include "maxctx/core/check.h"
#include "maxctx/kernels/cpu/cross_entropy.h"
#include "maxctx/kernels/cpu/elementwise.h"
#include "maxctx/kernels/cpu/embedding.h"
#include "maxctx/kernels/cpu/matmul.h"
#include "maxctx/kernels/cpu/rmsnorm.h"
#include "maxctx/kernels/cpu/rope.h"
#include "maxctx/kernels/cpu/swiglu.h"

namespace maxctx::model {
namespace {

namespace k = kernels::cpu;

// This rank's share of the model's dimensions.
struct LocalDims {
  int64_t N, E, Hq, Hkv, D, F, V;
  int64_t q_dim() const { return Hq * D; }
  int64_t kv_dim() const { return Hkv * D; }
};

LocalDims local_dims(const LlamaConfig& c, const TokenBatch& b, const parallel::ModelPlan& plan) {
  return {b.batch * b.seq,
          c.emb_dim,
          c.num_query_heads / plan.tensor_size,
          c.num_kv_heads / plan.tensor_size,
          c.head_dim,
          c.mlp_dim / plan.tensor_size,
          c.vocab_size};
}

kernels::AttentionParams attention_dims(const LlamaConfig& c, const LocalDims& d) {
  kernels::AttentionParams p;
  p.heads_q = d.Hq;
  p.heads_kv = d.Hkv;
  p.head_dim = d.D;
  p.sliding_window = c.sliding_window;
  return p;
}

parallel::TokenLayout token_layout(const TokenBatch& b) {
  return {b.batch, b.seq, b.positions, b.segment_ids};
}

void check_activations(const LlamaConfig& c, const TokenBatch& b, const LlamaActivations& acts) {
  MAXCTX_CHECK(acts.batch == b.batch && acts.seq == b.seq,
               "activations were allocated for (B={}, S={}), the batch is (B={}, S={})", acts.batch,
               acts.seq, b.batch, b.seq);
  MAXCTX_CHECK_EQ(static_cast<int64_t>(acts.layers.size()), c.num_layers,
                  "activations for another model");
}

void attention_block_forward(const LlamaConfig& c, const LocalDims& d, const LayerWeights& w,
                             const TokenBatch& b, parallel::ModelPlan& plan, LlamaActivations& acts,
                             const float* residual_in, float* residual_out, LayerActivations& a) {
  k::rmsnorm_forward(a.attn_norm_out.data<float>(), a.attn_norm_rstd.data<float>(), residual_in,
                     w.attn_norm, d.N, d.E, c.norm_eps);
  k::matmul_forward(a.q.data<float>(), a.attn_norm_out.data<float>(), w.wq, d.N, d.E, d.q_dim());
  k::matmul_forward(a.k.data<float>(), a.attn_norm_out.data<float>(), w.wk, d.N, d.E, d.kv_dim());
  k::matmul_forward(a.v.data<float>(), a.attn_norm_out.data<float>(), w.wv, d.N, d.E, d.kv_dim());
  k::rope_forward(a.q.data<float>(), a.q.data<float>(), acts.rope_cos.data<float>(),
                  acts.rope_sin.data<float>(), d.N, d.Hq, d.D);
  k::rope_forward(a.k.data<float>(), a.k.data<float>(), acts.rope_cos.data<float>(),
                  acts.rope_sin.data<float>(), d.N, d.Hkv, d.D);
  plan.attention->forward(a.attn_out.data<float>(), a.lse.data<float>(), a.q.data<float>(),
                          a.k.data<float>(), a.v.data<float>(), token_layout(b),
                          attention_dims(c, d));
  // o_proj is row-parallel: each tensor rank holds a partial sum of the output.
  k::matmul_forward(residual_out, a.attn_out.data<float>(), w.wo, d.N, d.q_dim(), d.E);
  plan.tensor->all_reduce_sum(residual_out, d.N * d.E);
  k::add_inplace(residual_out, residual_in, d.N * d.E);
}

void mlp_block_forward(const LlamaConfig& c, const LocalDims& d, const LayerWeights& w,
                       parallel::ModelPlan& plan, const float* residual_in, float* residual_out,
                       LayerActivations& a) {
  k::rmsnorm_forward(a.mlp_norm_out.data<float>(), a.mlp_norm_rstd.data<float>(), residual_in,
                     w.mlp_norm, d.N, d.E, c.norm_eps);
  k::matmul_forward(a.gate.data<float>(), a.mlp_norm_out.data<float>(), w.w_gate, d.N, d.E, d.F);
  k::matmul_forward(a.up.data<float>(), a.mlp_norm_out.data<float>(), w.w_up, d.N, d.E, d.F);
  k::swiglu_forward(a.swiglu_out.data<float>(), a.gate.data<float>(), a.up.data<float>(), d.N, d.F);
  k::matmul_forward(residual_out, a.swiglu_out.data<float>(), w.w_down, d.N, d.F, d.E);
  plan.tensor->all_reduce_sum(residual_out, d.N * d.E);
  k::add_inplace(residual_out, residual_in, d.N * d.E);
}

// d_residual holds dL/d(residual_out) on entry and dL/d(residual_in) on exit.
void mlp_block_backward(const LocalDims& d, const LayerWeights& w, const LayerWeights& g,
                        parallel::ModelPlan& plan, const float* residual_in, LlamaActivations& acts,
                        LayerActivations& a) {
  float* d_residual = acts.d_residual.data<float>();
  k::matmul_backward(acts.d_swiglu.data<float>(), g.w_down, d_residual, a.swiglu_out.data<float>(),
                     w.w_down, d.N, d.F, d.E);
  k::swiglu_backward(acts.d_gate.data<float>(), acts.d_up.data<float>(),
                     acts.d_swiglu.data<float>(), a.gate.data<float>(), a.up.data<float>(), d.N,
                     d.F);
  float* d_normed = acts.d_normed.data<float>();
  k::matmul_backward(d_normed, g.w_gate, acts.d_gate.data<float>(), a.mlp_norm_out.data<float>(),
                     w.w_gate, d.N, d.E, d.F);
  k::matmul_backward_accumulate_input(d_normed, g.w_up, acts.d_up.data<float>(),
                                      a.mlp_norm_out.data<float>(), w.w_up, d.N, d.E, d.F);
  // gate/up are column-parallel: their input gradients are partial sums over tensor ranks.
  plan.tensor->all_reduce_sum(d_normed, d.N * d.E);
  k::rmsnorm_backward(acts.d_x.data<float>(), g.mlp_norm, d_normed, residual_in, w.mlp_norm,
                      a.mlp_norm_rstd.data<float>(), d.N, d.E);
  k::add_inplace(d_residual, acts.d_x.data<float>(), d.N * d.E);
}

void attention_block_backward(const LlamaConfig& c, const LocalDims& d, const LayerWeights& w,
                              const LayerWeights& g, const TokenBatch& b, parallel::ModelPlan& plan,
                              const float* residual_in, LlamaActivations& acts,
                              LayerActivations& a) {
  float* d_residual = acts.d_residual.data<float>();
  k::matmul_backward(acts.d_attn.data<float>(), g.wo, d_residual, a.attn_out.data<float>(), w.wo,
                     d.N, d.q_dim(), d.E);
  plan.attention->backward(acts.d_q.data<float>(), acts.d_k.data<float>(), acts.d_v.data<float>(),
                           acts.d_attn.data<float>(), a.attn_out.data<float>(), a.lse.data<float>(),
                           a.q.data<float>(), a.k.data<float>(), a.v.data<float>(), token_layout(b),
                           attention_dims(c, d));
  k::rope_backward(acts.d_q.data<float>(), acts.d_q.data<float>(), acts.rope_cos.data<float>(),
                   acts.rope_sin.data<float>(), d.N, d.Hq, d.D);
  k::rope_backward(acts.d_k.data<float>(), acts.d_k.data<float>(), acts.rope_cos.data<float>(),
                   acts.rope_sin.data<float>(), d.N, d.Hkv, d.D);
  float* d_normed = acts.d_normed.data<float>();
  const float* normed = a.attn_norm_out.data<float>();
  k::matmul_backward(d_normed, g.wq, acts.d_q.data<float>(), normed, w.wq, d.N, d.E, d.q_dim());
  k::matmul_backward_accumulate_input(d_normed, g.wk, acts.d_k.data<float>(), normed, w.wk, d.N,
                                      d.E, d.kv_dim());
  k::matmul_backward_accumulate_input(d_normed, g.wv, acts.d_v.data<float>(), normed, w.wv, d.N,
                                      d.E, d.kv_dim());
  plan.tensor->all_reduce_sum(d_normed, d.N * d.E);
  k::rmsnorm_backward(acts.d_x.data<float>(), g.attn_norm, d_normed, residual_in, w.attn_norm,
                      a.attn_norm_rstd.data<float>(), d.N, d.E);
  k::add_inplace(d_residual, acts.d_x.data<float>(), d.N * d.E);
}

void before_use(parallel::ModelPlan& plan, int64_t unit) {
  if (plan.weights != nullptr) plan.weights->before_use(static_cast<int>(unit));
}

void gradients_ready(parallel::ModelPlan& plan, int64_t unit) {
  if (plan.weights != nullptr) plan.weights->gradients_ready(static_cast<int>(unit));
}

}  // namespace

LossSums llama_forward(const LlamaConfig& c, const LlamaWeights& w, const TokenBatch& b,
                       parallel::ModelPlan& plan, LlamaActivations& acts) {
  check_activations(c, b, acts);
  const LocalDims d = local_dims(c, b, plan);
  k::rope_cos_sin(acts.rope_cos.data<float>(), acts.rope_sin.data<float>(), b.positions, d.N, d.D,
                  c.rope);
  const int64_t head_unit = c.num_layers + 1;
  before_use(plan, 0);
  k::embedding_forward(acts.residual[0].data<float>(), b.tokens, w.embed, d.N, d.E, d.V);
  for (int64_t l = 0; l < c.num_layers; ++l) {
    before_use(plan, l + 1);
    LayerActivations& a = acts.layers[l];
    attention_block_forward(c, d, w.layers[l], b, plan, acts, acts.residual[l].data<float>(),
                            acts.residual_mid[l].data<float>(), a);
    mlp_block_forward(c, d, w.layers[l], plan, acts.residual_mid[l].data<float>(),
                      acts.residual[l + 1].data<float>(), a);
  }
  before_use(plan, head_unit);
  k::rmsnorm_forward(acts.final_norm_out.data<float>(), acts.final_norm_rstd.data<float>(),
                     acts.residual[c.num_layers].data<float>(), w.final_norm, d.N, d.E, c.norm_eps);
  k::matmul_forward(acts.logits.data<float>(), acts.final_norm_out.data<float>(), w.lm_head, d.N,
                    d.E, d.V);
  LossSums sums;
  if (b.targets == nullptr) return sums;
  MAXCTX_CHECK(b.loss_weights != nullptr, "targets without loss weights");
  k::cross_entropy_forward(acts.token_loss.data<float>(), acts.xent_lse.data<float>(),
                           acts.logits.data<float>(), b.targets, b.loss_weights, d.N, d.V);
  const float* token_loss = acts.token_loss.data<float>();
  for (int64_t i = 0; i < d.N; ++i) {
    sums.loss_sum += token_loss[i];
    sums.weight_sum += b.loss_weights[i];
  }
  return sums;
}

void llama_backward(const LlamaConfig& c, const LlamaWeights& w, const LlamaWeights& g,
                    const TokenBatch& b, parallel::ModelPlan& plan, LlamaActivations& acts,
                    float d_loss) {
  check_activations(c, b, acts);
  MAXCTX_CHECK(b.targets != nullptr && b.loss_weights != nullptr, "backward needs targets");
  const LocalDims d = local_dims(c, b, plan);
  float* d_logits = acts.logits.data<float>();  // in place: logits are not needed after this
  k::cross_entropy_backward(d_logits, acts.logits.data<float>(), acts.xent_lse.data<float>(),
                            b.targets, b.loss_weights, d_loss, d.N, d.V);
  k::matmul_backward(acts.d_normed.data<float>(), g.lm_head, d_logits,
                     acts.final_norm_out.data<float>(), w.lm_head, d.N, d.E, d.V);
  k::rmsnorm_backward(acts.d_residual.data<float>(), g.final_norm, acts.d_normed.data<float>(),
                      acts.residual[c.num_layers].data<float>(), w.final_norm,
                      acts.final_norm_rstd.data<float>(), d.N, d.E);
  gradients_ready(plan, c.num_layers + 1);
  for (int64_t l = c.num_layers - 1; l >= 0; --l) {
    LayerActivations& a = acts.layers[l];
    mlp_block_backward(d, w.layers[l], g.layers[l], plan, acts.residual_mid[l].data<float>(), acts,
                       a);
    attention_block_backward(c, d, w.layers[l], g.layers[l], b, plan,
                             acts.residual[l].data<float>(), acts, a);
    gradients_ready(plan, l + 1);
  }
  // With tied embeddings the head's gradient also lands in the embedding unit, so that unit is
  // only ready now.
  k::embedding_backward(g.embed, acts.d_residual.data<float>(), b.tokens, d.N, d.E, d.V);
  gradients_ready(plan, 0);
}

}  // namespace maxctx::model

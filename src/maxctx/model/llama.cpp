#include "maxctx/model/llama.h"

#include <algorithm>
#include <vector>

#include "maxctx/core/check.h"
#include "maxctx/core/trace.h"
#include "maxctx/kernels/host_transfer.h"
#include "maxctx/model/decoder_layer.h"

namespace maxctx::model {
namespace {

kernels::AttentionParams attention_dims(const LlamaConfig& c, const LocalDims& d) {
  kernels::AttentionParams p;
  p.heads_q = d.Hq;
  p.heads_kv = d.Hkv;
  p.head_dim = d.D;
  p.sliding_window = c.sliding_window;
  return p;
}

parallel::TokenLayout token_layout(const TokenBatch& b) {
  return {b.batch, b.seq, b.positions, b.segment_ids, b.host_positions, b.host_segment_ids};
}

// The loss weights as a view in the backend's memory.
TensorView loss_weights_view(const TokenBatch& b, int64_t n, const kernels::Kernels& k) {
  return TensorView(const_cast<float*>(b.loss_weights), DType::kF32, Shape{n}, k.device());
}

void check_activations(const LlamaConfig& c, const TokenBatch& b, const LlamaActivations& acts) {
  MAXCTX_CHECK(acts.batch == b.batch && acts.seq == b.seq,
               "activations were allocated for (B={}, S={}), the batch is (B={}, S={})", acts.batch,
               acts.seq, b.batch, b.seq);
  MAXCTX_CHECK_EQ(static_cast<int64_t>(acts.layers.size()), c.num_layers,
                  "activations for another model");
}

// Training's attention: the context-parallel (or local) plan, which keeps lse for backward.
class PlanAttention final : public parallel::LayerAttention {
 public:
  explicit PlanAttention(parallel::AttentionPlan& plan) : plan_(plan) {}
  void forward(int64_t, TensorView out, TensorView lse, TensorView q, TensorView k, TensorView v,
               const parallel::TokenLayout& tokens, const kernels::AttentionParams& dims) override {
    plan_.forward(out, lse, q, k, v, tokens, dims);
  }

 private:
  parallel::AttentionPlan& plan_;
};

DecoderLayerWeights layer_weights(const LayerWeights& w) {
  return {w.attn_norm, linear_of(w.wq),     linear_of(w.wk),   linear_of(w.wv),     linear_of(w.wo),
          w.mlp_norm,  linear_of(w.w_gate), linear_of(w.w_up), linear_of(w.w_down), w.moe};
}

DecoderLayerBuffers layer_buffers(LayerActivations& a, LlamaActivations& acts) {
  DecoderLayerBuffers b;
  b.attn_norm_rstd = a.attn_norm_rstd;
  b.attn_norm_out = a.attn_norm_out;
  b.q = a.q;
  b.k = a.k;
  b.v = a.v;
  b.attn_out = a.attn_out;
  b.lse = a.lse;
  b.proj = acts.proj.view();
  b.mlp_norm_rstd = a.mlp_norm_rstd;
  b.mlp_norm_out = a.mlp_norm_out;
  b.gate = a.gate;
  b.up = a.up;
  b.swiglu_out = a.swiglu_out;
  b.moe = &a.moe;
  return b;
}

// d_residual holds dL/d(residual_out) on entry and dL/d(residual_in) on exit.
void mlp_block_backward(const kernels::Kernels& k, const LayerWeights& w, const LayerWeights& g,
                        parallel::ModelPlan& plan, TensorView residual_in, LlamaActivations& acts,
                        const LayerActivations& a) {
  const TensorView d_residual = acts.d_residual.view();
  k.matmul_backward(acts.d_swiglu.view(), g.w_down, d_residual, a.swiglu_out, w.w_down);
  k.swiglu_backward(acts.d_gate.view(), acts.d_up.view(), acts.d_swiglu.view(), a.gate, a.up);
  const TensorView d_normed = acts.d_normed.view();
  k.matmul_backward(d_normed, g.w_gate, acts.d_gate.view(), a.mlp_norm_out, w.w_gate);
  k.matmul_backward_accumulate_input(d_normed, g.w_up, acts.d_up.view(), a.mlp_norm_out, w.w_up);
  // gate/up are column-parallel: their input gradients are partial sums over tensor ranks.
  plan.tensor->all_reduce_sum(d_normed);
  k.rmsnorm_backward(acts.d_x.view(), g.mlp_norm, d_normed, residual_in, w.mlp_norm,
                     a.mlp_norm_rstd);
  k.add_inplace(d_residual, acts.d_x.view());
}

// mlp_block_backward for a mixture of experts (which sums its partial sums over tensor).
void moe_block_backward(const kernels::Kernels& k, const LlamaConfig& c, const LayerWeights& w,
                        const LayerWeights& g, const TokenBatch& b, parallel::ModelPlan& plan,
                        TensorView residual_in, LlamaActivations& acts, LayerActivations& a,
                        float d_moe_lb) {
  const TensorView d_residual = acts.d_residual.view();
  moe_backward(k, c, w.moe, g.moe, b.batch, b.seq, a.mlp_norm_out, d_residual, acts.d_normed.view(),
               a.moe, acts.moe_grad, d_moe_lb, plan.tensor, plan.experts);
  k.rmsnorm_backward(acts.d_x.view(), g.mlp_norm, acts.d_normed.view(), residual_in, w.mlp_norm,
                     a.mlp_norm_rstd);
  k.add_inplace(d_residual, acts.d_x.view());
}

void attention_block_backward(const kernels::Kernels& k, const kernels::AttentionParams& dims,
                              const LayerWeights& w, const LayerWeights& g, const TokenBatch& b,
                              parallel::ModelPlan& plan, TensorView residual_in,
                              LlamaActivations& acts, const LayerActivations& a) {
  const TensorView d_residual = acts.d_residual.view();
  k.matmul_backward(acts.d_attn.view(), g.wo, d_residual, a.attn_out, w.wo);
  plan.attention->backward(acts.d_q.view(), acts.d_k.view(), acts.d_v.view(), acts.d_attn.view(),
                           a.attn_out, a.lse, a.q, a.k, a.v, token_layout(b), dims);
  k.rope_backward(acts.d_q.view(), acts.d_q.view(), acts.rope_cos.view(), acts.rope_sin.view());
  k.rope_backward(acts.d_k.view(), acts.d_k.view(), acts.rope_cos.view(), acts.rope_sin.view());
  const TensorView d_normed = acts.d_normed.view();
  const TensorView normed = a.attn_norm_out;
  k.matmul_backward(d_normed, g.wq, acts.d_q.view(), normed, w.wq);
  k.matmul_backward_accumulate_input(d_normed, g.wk, acts.d_k.view(), normed, w.wk);
  k.matmul_backward_accumulate_input(d_normed, g.wv, acts.d_v.view(), normed, w.wv);
  plan.tensor->all_reduce_sum(d_normed);
  k.rmsnorm_backward(acts.d_x.view(), g.attn_norm, d_normed, residual_in, w.attn_norm,
                     a.attn_norm_rstd);
  k.add_inplace(d_residual, acts.d_x.view());
}

void before_use(parallel::ModelPlan& plan, int64_t unit) {
  if (plan.weights != nullptr) plan.weights->before_use(static_cast<int>(unit));
}

void after_use(parallel::ModelPlan& plan, int64_t unit) {
  if (plan.weights != nullptr) plan.weights->after_use(static_cast<int>(unit));
}

void before_gradients(parallel::ModelPlan& plan, int64_t unit) {
  if (plan.weights != nullptr) plan.weights->before_gradients(static_cast<int>(unit));
}

void gradients_ready(parallel::ModelPlan& plan, int64_t unit) {
  if (plan.weights != nullptr) plan.weights->gradients_ready(static_cast<int>(unit));
}

// The head reads the final norm (its unit, L+1) and, with tied embeddings, the embedding table
// (unit 0), which is then gathered again for it.
void head_before_use(const LlamaConfig& c, parallel::ModelPlan& plan) {
  before_use(plan, c.num_layers + 1);
  if (c.tie_embeddings) before_use(plan, 0);
}

void head_after_use(const LlamaConfig& c, parallel::ModelPlan& plan) {
  after_use(plan, c.num_layers + 1);
  if (c.tie_embeddings) after_use(plan, 0);
}

// The head's backward writes the final norm's and the output head's gradients (unit L+1), and
// with tied embeddings the embedding table's (unit 0).
void head_before_gradients(const LlamaConfig& c, parallel::ModelPlan& plan) {
  before_gradients(plan, c.num_layers + 1);
  if (c.tie_embeddings) before_gradients(plan, 0);
}

const kernels::Kernels& kernels_of(const parallel::ModelPlan& plan) {
  MAXCTX_CHECK(plan.kernels != nullptr && plan.attention != nullptr && plan.tensor != nullptr,
               "a model plan needs kernels, an attention plan and a tensor reducer");
  return *plan.kernels;
}

// What every training layer's forward (and its recomputation in backward) runs with.
struct TrainingLayers {
  TrainingLayers(const LlamaConfig& c, const TokenBatch& b, parallel::ModelPlan& plan,
                 LlamaActivations& acts)
      : attention(*plan.attention),
        inputs{token_layout(b), attention_dims(c, local_dims(c, b.batch, b.seq, plan.tensor_size)),
               acts.rope_cos.view(), acts.rope_sin.view()} {
    layer_plan.kernels = plan.kernels;
    layer_plan.attention = &attention;
    layer_plan.tensor = plan.tensor;
    layer_plan.sequence = plan.sequence;
    layer_plan.chunks = plan.chunks;
    layer_plan.experts = plan.experts;
  }
  PlanAttention attention;
  LayerInputs inputs;
  DecoderLayerPlan layer_plan;
};

// The embedding and the decoder layers: acts.residual[0..L] from the tokens.
void decoder_forward(const kernels::Kernels& k, const LlamaConfig& c, const LlamaWeights& w,
                     const TokenBatch& b, parallel::ModelPlan& plan, LlamaActivations& acts) {
  k.rope_cos_sin(acts.rope_cos.view(), acts.rope_sin.view(), b.positions, c.rope);
  TrainingLayers layers(c, b, plan, acts);
  before_use(plan, 0);
  k.embedding_forward(layer_input(acts, 0), b.tokens, w.embed);
  after_use(plan, 0);
  offload_layer_input(k, acts, 0);
  for (int64_t l = 0; l < c.num_layers; ++l) {
    const trace::Span span("layer_forward", trace::Category::kLayer,
                           trace::enabled() ? trace::numbered("layer", l) : nullptr);
    before_use(plan, l + 1);
    LayerActivations& a = acts.layers[l];
    DecoderLayerBuffers buffers = layer_buffers(a, acts);
    decoder_layer_forward(c, l, layer_weights(w.layers[l]), layers.inputs, layers.layer_plan,
                          layer_input(acts, l), a.residual_mid, layer_input(acts, l + 1), buffers);
    after_use(plan, l + 1);
    offload_layer(k, acts, l);
    offload_layer_input(k, acts, l + 1);
  }
}

// The decoder layers' backward, from d_residual = dL/d(residual[L]) down to the embedding.
void decoder_backward(const kernels::Kernels& k, const LlamaConfig& c, const LlamaWeights& w,
                      const LlamaWeights& g, const TokenBatch& b, parallel::ModelPlan& plan,
                      LlamaActivations& acts, float d_moe_lb) {
  TrainingLayers layers(c, b, plan, acts);
  begin_backward(k, acts);
  for (int64_t l = c.num_layers - 1; l >= 0; --l) {
    const trace::Span span("layer_backward", trace::Category::kLayer,
                           trace::enabled() ? trace::numbered("layer", l) : nullptr);
    before_use(plan, l + 1);
    before_gradients(plan, l + 1);
    LayerActivations& a = acts.layers[l];
    // What the remat policy kept in host memory back on the device, and what it did not keep,
    // recomputed from the layer's input.
    restore_layer(k, acts, l);
    DecoderLayerBuffers buffers = layer_buffers(a, acts);
    decoder_layer_recompute(c, l, layer_weights(w.layers[l]), layers.inputs, layers.layer_plan,
                            acts.remat, layer_input(acts, l), a.residual_mid, buffers);
    if (c.moe) {
      moe_block_backward(k, c, w.layers[l], g.layers[l], b, plan, a.residual_mid, acts, a,
                         d_moe_lb);
    } else {
      mlp_block_backward(k, w.layers[l], g.layers[l], plan, a.residual_mid, acts, a);
    }
    attention_block_backward(k, layers.inputs.dims, w.layers[l], g.layers[l], b, plan,
                             layer_input(acts, l), acts, a);
    after_use(plan, l + 1);
    gradients_ready(plan, l + 1);
  }
  // With tied embeddings the head's gradient also lands in the embedding unit, so that unit is
  // only ready now. The embedding's backward reads no weights.
  before_gradients(plan, 0);
  k.embedding_backward(g.embed, acts.d_residual.view(), b.tokens);
  gradients_ready(plan, 0);
}

// The final RMSNorm of the last residual, which the head reads, and its backward from d_normed.
void final_norm_forward(const kernels::Kernels& k, const LlamaConfig& c, const LlamaWeights& w,
                        LlamaActivations& acts) {
  k.rmsnorm_forward(acts.final_norm_out.view(), acts.final_norm_rstd.view(),
                    layer_input(acts, c.num_layers), w.final_norm, c.norm_eps);
}

void final_norm_backward(const kernels::Kernels& k, const LlamaConfig& c, const LlamaWeights& w,
                         const LlamaWeights& g, LlamaActivations& acts) {
  k.rmsnorm_backward(acts.d_residual.view(), g.final_norm, acts.d_normed.view(),
                     layer_input(acts, c.num_layers), w.final_norm, acts.final_norm_rstd.view());
}

// Tokens [begin, end) of the rank's N: one loss tile (num_vocab_tiling), its logits in the
// first end - begin rows of acts.logits.
struct LossTile {
  int64_t begin = 0;
  int64_t end = 0;
  TensorView logits;  // (end - begin, V)
};

std::vector<LossTile> loss_tiles(const LlamaConfig& c, int64_t N, const LlamaActivations& acts) {
  const int64_t rows = logit_rows(N, c.vocab_tiles);
  MAXCTX_CHECK(acts.logits.view().shape()[0] >= rows,
               "the logits buffer holds {} rows, a tile of {} tokens in {} tiles needs {}",
               acts.logits.view().shape()[0], N, c.vocab_tiles, rows);
  std::vector<LossTile> tiles;
  for (int64_t begin = 0; begin < N; begin += rows) {
    const int64_t end = std::min(N, begin + rows);
    tiles.push_back({begin, end, acts.logits.view().rows(0, end - begin)});
  }
  return tiles;
}

// The readout slots of a forward (acts.readout): the loss sum, then one hit count per tile.
constexpr int64_t kLossSlot = 0;
int64_t hits_slot(int64_t tile) { return 1 + tile; }

// A tile's logits, its rows' loss and lse, and (when asked) how many of its scored rows have
// their target as first arg max, written to the tile's readout slot.
void head_tile_forward(const kernels::Kernels& k, const LlamaWeights& w, const TokenBatch& b,
                       LlamaActivations& acts, const LossTile& t, int64_t tile, bool count_hits) {
  k.matmul_forward(t.logits, acts.final_norm_out.view().rows(t.begin, t.end), w.lm_head);
  const TensorView weights = loss_weights_view(b, t.end, k).rows(t.begin, t.end);
  k.cross_entropy_forward(acts.token_loss.view().rows(t.begin, t.end),
                          acts.xent_lse.view().rows(t.begin, t.end), t.logits, b.targets + t.begin,
                          weights);
  if (count_hits) {
    k.count_arg_max_hits(acts.readout.slot(hits_slot(tile)), t.logits, b.targets + t.begin,
                         weights);
  }
}

// d_logits of a tile in place of its logits, then its rows of d(final norm output) and its
// part of the head's weight gradient.
void head_tile_backward(const kernels::Kernels& k, const LlamaWeights& w, const LlamaWeights& g,
                        const TokenBatch& b, LlamaActivations& acts, const LossTile& t,
                        float d_loss) {
  k.cross_entropy_backward(t.logits, t.logits, acts.xent_lse.view().rows(t.begin, t.end),
                           b.targets + t.begin, loss_weights_view(b, t.end, k).rows(t.begin, t.end),
                           d_loss);
  k.matmul_backward(acts.d_normed.view().rows(t.begin, t.end), g.lm_head, t.logits,
                    acts.final_norm_out.view().rows(t.begin, t.end), w.lm_head);
}

// The readout slots a forward of `tiles` loss tiles writes, reserved before its first.
int64_t readout_slots(int64_t tiles, bool count_hits) { return 1 + (count_hits ? tiles : 0); }

// The loss sum of the N rows, in token order, into its readout slot.
void write_loss_sum(const kernels::Kernels& k, int64_t N, LlamaActivations& acts) {
  k.sum_in_order(acts.readout.slot(kLossSlot), acts.token_loss.view().elements(0, N));
}

// The forward's one readback of its `slots` readout slots (the loss sum, then each tile's hits
// when counted), added to `sums` with the weight sum and the scored count, which the host takes
// from its own copy of the loss weights.
void read_loss_sums(const kernels::Kernels& k, const TokenBatch& b, int64_t slots, bool count_hits,
                    LlamaActivations& acts, LossSums& sums) {
  const std::vector<double> values = acts.readout.read(k, slots);
  sums.loss_sum += values[kLossSlot];
  for (int64_t s = kLossSlot + 1; s < slots; ++s) sums.correct += values[s];
  const float* weights = b.host_loss_weights ? b.host_loss_weights : b.loss_weights;
  for (int64_t i = 0; i < b.batch * b.seq; ++i) {
    sums.weight_sum += weights[i];
    if (count_hits && weights[i] != 0.0f) sums.scored += 1.0;
  }
}

LossSums moe_sums(const LlamaConfig& c, const LlamaActivations& acts) {
  LossSums sums;
  if (!c.moe) return sums;
  for (const LayerActivations& a : acts.layers) {
    sums.moe_lb_sum += a.moe.load_balance;
    sums.moe_dropped += a.moe.dropped;
  }
  return sums;
}

}  // namespace

double moe_lb_scale(const LlamaConfig& c, int64_t global_sequences) {
  MAXCTX_CHECK(global_sequences > 0 && c.num_layers > 0, "a batch of {} sequences",
               global_sequences);
  return 1.0 / (static_cast<double>(c.num_layers) * static_cast<double>(global_sequences));
}

namespace {

// llama_forward up to its readback: the readout slots it wrote (the loss sum and the tiles'
// hits in acts.readout), 0 when it computed no loss (the batch has no targets).
int64_t forward_without_readback(const LlamaConfig& c, const LlamaWeights& w, const TokenBatch& b,
                                 parallel::ModelPlan& plan, LlamaActivations& acts,
                                 bool count_hits) {
  const kernels::Kernels& k = kernels_of(plan);
  check_activations(c, b, acts);
  const LocalDims d = local_dims(c, b.batch, b.seq, plan.tensor_size);
  decoder_forward(k, c, w, b, plan, acts);
  head_before_use(c, plan);
  final_norm_forward(k, c, w, acts);
  if (b.targets == nullptr) {
    MAXCTX_CHECK(c.vocab_tiles == 1 && acts.logits.view().shape()[0] == d.N,
                 "a forward without targets returns all {} rows of logits, which needs "
                 "num_vocab_tiling = 1 (it is {})",
                 d.N, c.vocab_tiles);
    k.matmul_forward(acts.logits.view(), acts.final_norm_out.view(), w.lm_head);
    head_after_use(c, plan);
    return 0;
  }
  MAXCTX_CHECK(b.loss_weights != nullptr, "targets without loss weights");
  const std::vector<LossTile> tiles = loss_tiles(c, d.N, acts);
  const int64_t slots = readout_slots(static_cast<int64_t>(tiles.size()), count_hits);
  acts.readout.reserve(k, slots);
  for (size_t t = 0; t < tiles.size(); ++t) {
    head_tile_forward(k, w, b, acts, tiles[t], static_cast<int64_t>(t), count_hits);
  }
  head_after_use(c, plan);
  write_loss_sum(k, d.N, acts);
  return slots;
}

// The sums of a forward that wrote `slots` readout slots (0: no loss), read back once.
LossSums forward_sums(const LlamaConfig& c, const TokenBatch& b, parallel::ModelPlan& plan,
                      LlamaActivations& acts, int64_t slots, bool count_hits) {
  LossSums sums = moe_sums(c, acts);
  if (slots > 0) read_loss_sums(kernels_of(plan), b, slots, count_hits, acts, sums);
  return sums;
}

}  // namespace

LossSums llama_forward(const LlamaConfig& c, const LlamaWeights& w, const TokenBatch& b,
                       parallel::ModelPlan& plan, LlamaActivations& acts, bool count_hits) {
  const int64_t slots = forward_without_readback(c, w, b, plan, acts, count_hits);
  return forward_sums(c, b, plan, acts, slots, count_hits);
}

void llama_backward(const LlamaConfig& c, const LlamaWeights& w, const LlamaWeights& g,
                    const TokenBatch& b, parallel::ModelPlan& plan, LlamaActivations& acts,
                    float d_loss, float d_moe_lb) {
  const kernels::Kernels& k = kernels_of(plan);
  check_activations(c, b, acts);
  MAXCTX_CHECK(b.targets != nullptr && b.loss_weights != nullptr, "backward needs targets");
  const LocalDims d = local_dims(c, b.batch, b.seq, plan.tensor_size);
  head_before_use(c, plan);
  head_before_gradients(c, plan);
  for (const LossTile& t : loss_tiles(c, d.N, acts)) {
    // Untiled, the forward's logits are still here; a tile's are computed again.
    if (c.vocab_tiles > 1) {
      k.matmul_forward(t.logits, acts.final_norm_out.view().rows(t.begin, t.end), w.lm_head);
    }
    head_tile_backward(k, w, g, b, acts, t, d_loss);
  }
  final_norm_backward(k, c, w, g, acts);
  head_after_use(c, plan);
  gradients_ready(plan, c.num_layers + 1);
  decoder_backward(k, c, w, g, b, plan, acts, d_moe_lb);
}

LossSums llama_forward_backward(const LlamaConfig& c, const LlamaWeights& w, const LlamaWeights& g,
                                const TokenBatch& b, parallel::ModelPlan& plan,
                                LlamaActivations& acts, float d_loss, float d_moe_lb,
                                bool count_hits) {
  if (c.vocab_tiles == 1) {
    const int64_t slots = forward_without_readback(c, w, b, plan, acts, count_hits);
    llama_backward(c, w, g, b, plan, acts, d_loss, d_moe_lb);
    return forward_sums(c, b, plan, acts, slots, count_hits);
  }
  const kernels::Kernels& k = kernels_of(plan);
  check_activations(c, b, acts);
  MAXCTX_CHECK(b.targets != nullptr && b.loss_weights != nullptr, "backward needs targets");
  const LocalDims d = local_dims(c, b.batch, b.seq, plan.tensor_size);
  decoder_forward(k, c, w, b, plan, acts);
  head_before_use(c, plan);
  head_before_gradients(c, plan);
  final_norm_forward(k, c, w, acts);
  const std::vector<LossTile> tiles = loss_tiles(c, d.N, acts);
  const int64_t slots = readout_slots(static_cast<int64_t>(tiles.size()), count_hits);
  acts.readout.reserve(k, slots);
  for (size_t t = 0; t < tiles.size(); ++t) {
    head_tile_forward(k, w, b, acts, tiles[t], static_cast<int64_t>(t), count_hits);
    head_tile_backward(k, w, g, b, acts, tiles[t], d_loss);
  }
  write_loss_sum(k, d.N, acts);
  final_norm_backward(k, c, w, g, acts);
  head_after_use(c, plan);
  gradients_ready(plan, c.num_layers + 1);
  decoder_backward(k, c, w, g, b, plan, acts, d_moe_lb);
  return forward_sums(c, b, plan, acts, slots, count_hits);
}

}  // namespace maxctx::model

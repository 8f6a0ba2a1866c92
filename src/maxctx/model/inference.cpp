#include "maxctx/model/inference.h"

#include "maxctx/core/check.h"
#include "maxctx/core/split.h"

namespace maxctx::model {
namespace {

// int8 codes plus a scale and a row sum per output row, or the weights as stored.
int64_t weight_bytes(TensorView weight, const kernels::Int8Weights* i8) {
  if (i8 != nullptr) return int8_weight_bytes(i8->out_dim, i8->in_dim);
  return static_cast<int64_t>(weight.bytes());
}

int64_t linear_bytes(const Linear& l) { return weight_bytes(l.weight, l.i8); }

// The index of the quantized matrix whose region holds `weight`, or −1.
int64_t holding_matrix(TensorView weight, const std::vector<QuantizedMatrix>& matrices) {
  const auto* at = static_cast<const std::byte*>(weight.raw());
  for (size_t i = 0; i < matrices.size(); ++i) {
    const auto* begin = static_cast<const std::byte*>(matrices[i].region.raw());
    if (at >= begin && at < begin + matrices[i].region.bytes()) return static_cast<int64_t>(i);
  }
  return -1;
}

// The int8 copy of `weight` (a whole projection or a row split's rows of one) packed from the
// quantized matrix whose region holds it; a float weight outside every region (a head tied to
// the float embedding) is quantized as it is.
kernels::Int8Weights pack_prequantized(const kernels::Kernels& k, TensorView weight,
                                       const std::vector<QuantizedMatrix>& matrices) {
  const auto* at = static_cast<const std::byte*>(weight.raw());
  for (const QuantizedMatrix& m : matrices) {
    const auto* begin = static_cast<const std::byte*>(m.region.raw());
    if (at < begin || at >= begin + m.region.bytes()) continue;
    const int64_t in_dim = m.region.shape()[1];
    MAXCTX_CHECK(weight.shape().rank() == 2 && weight.shape()[1] == in_dim,
                 "a projection's rows inside a quantized matrix");
    const int64_t first = (at - begin) / static_cast<int64_t>(in_dim * dtype_size(weight.dtype()));
    const int64_t end = first + weight.shape()[0];
    return k.int8_pack_codes(m.codes.rows(first, end), m.scale.rows(first, end));
  }
  if (dtype_size(weight.dtype()) > 1) return k.int8_pack_weights(weight);  // not codes
  fail("the quantized checkpoint holds no int8 codes for a projection of shape ({}, {})",
       weight.shape()[0], weight.shape()[1]);
}

}  // namespace

int64_t int8_weight_bytes(int64_t out_dim, int64_t in_dim) {
  return out_dim * in_dim + 2 * out_dim * int64_t{sizeof(float)};
}

InferenceWeights::InferenceWeights(const kernels::Kernels& k, const LlamaConfig& c,
                                   const LlamaWeights& w, bool quantize_int8,
                                   parallel::RowSplitPart part,
                                   const std::vector<QuantizedMatrix>* prequantized,
                                   bool vocab_split)
    : split(part) {
  MAXCTX_CHECK(prequantized == nullptr || quantize_int8,
               "a quantized checkpoint's weights are read as int8 (quantization=int8)");
  MAXCTX_CHECK(part.ranks >= 1 && part.rank >= 0 && part.rank < part.ranks,
               "row split part {} of {}", part.rank, part.ranks);
  attention_rows_split_ =
      !w.layers.empty() && w.layers[0].wq.shape()[0] < c.num_query_heads * c.head_dim;
  mlp_rows_split_ = !c.moe && !w.layers.empty() && w.layers[0].w_gate.shape()[0] < c.mlp_dim;
  embed = w.embed;
  final_norm = w.final_norm;
  lm_head = linear_of(w.lm_head);
  for (const LayerWeights& lw : w.layers) {
    layers.push_back({lw.attn_norm, linear_of(lw.wq), linear_of(lw.wk), linear_of(lw.wv),
                      linear_of(lw.wo), lw.mlp_norm, linear_of(lw.w_gate), linear_of(lw.w_up),
                      linear_of(lw.w_down), lw.moe});
  }
  if (part.ranks > 1) {
    auto rows = [&](TensorView m) {  // this rank's rows of m
      const int64_t out_dim = m.shape()[0];
      const int64_t first = split_offset(out_dim, part.ranks, part.rank);
      return linear_of(m.rows(first, first + split_count(out_dim, part.ranks, part.rank)));
    };
    // Under a vocabulary split this rank's head rows are already its part (split_offset's).
    lm_head_part = vocab_split ? lm_head : rows(w.lm_head);
    // A mixture of experts has no row split (its experts are split over the axis instead,
    // parallel/parallelize.h InferenceParallelPlans::experts).
    // Stored split (inference_weight_specs), a dense MLP's weights are already this rank's
    // rows: the parts are the layers' own (set again below once quantized).
    for (size_t i = 0; i < w.layers.size(); ++i) {
      const LayerWeights& lw = w.layers[i];
      const DecoderLayerWeights& l = layers[i];
      mlp_parts.push_back(c.moe ? MlpRowsPart{}
                          : mlp_rows_split_
                              ? MlpRowsPart{l.w_gate, l.w_up, l.w_down}
                              : MlpRowsPart{rows(lw.w_gate), rows(lw.w_up), rows(lw.w_down)});
    }
  }
  if (!quantize_int8) return;
  // Every weight to quantize, and where its int8 copy goes (the view emptied once it is set).
  struct Target {
    TensorView* weight;
    const kernels::Int8Weights** i8;
  };
  std::vector<Target> all;
  auto add = [&](Linear& l) {
    if (l.out_dim > 0) all.push_back({&l.weight, &l.i8});  // a MoE layer's MLP ones are empty
  };
  for (DecoderLayerWeights& l : layers) {
    for (Linear* p : {&l.wq, &l.wk, &l.wv, &l.wo, &l.w_gate, &l.w_up, &l.w_down}) add(*p);
    // The experts as the dense MLP; the router stays fp32 (X rows: small, and the choices
    // follow its logits' order).
    for (ExpertWeights& e : l.moe.experts) {
      if (e.w_gate.numel() == 0) continue;  // another rank's expert (infer/model_source.h)
      all.push_back({&e.w_gate, &e.w_gate_i8});
      all.push_back({&e.w_up, &e.w_up_i8});
      all.push_back({&e.w_down, &e.w_down_i8});
    }
  }
  add(lm_head);
  // A part's rows quantize to the same codes and scales as in the whole matrix (per-row scales).
  if (!mlp_rows_split_) {
    for (MlpRowsPart& m : mlp_parts) {
      for (Linear* p : {&m.w_gate, &m.w_up, &m.w_down}) add(*p);
    }
  }
  if (!mlp_parts.empty() && !vocab_split) add(lm_head_part);
  // Filled completely before any pointer into it is taken. A quantized matrix's codes are
  // decommitted once its last target is packed (Kernels::decommit: the pages go back), so loading
  // holds the codes and their packed copy of one matrix at a time, not of the whole model.
  std::vector<size_t> last_use;  // per prequantized matrix: the last target packed from it
  std::vector<int64_t> matrix_of(all.size(), -1);
  if (prequantized != nullptr) {
    last_use.assign(prequantized->size(), 0);
    for (size_t i = 0; i < all.size(); ++i) {
      matrix_of[i] = holding_matrix(*all[i].weight, *prequantized);
      if (matrix_of[i] >= 0) last_use[static_cast<size_t>(matrix_of[i])] = i;
    }
  }
  quantized_.reserve(all.size());
  for (size_t i = 0; i < all.size(); ++i) {
    const Target& t = all[i];
    quantized_.push_back(prequantized != nullptr ? pack_prequantized(k, *t.weight, *prequantized)
                                                 : k.int8_pack_weights(*t.weight));
    const int64_t m = matrix_of[i];
    if (m >= 0 && last_use[static_cast<size_t>(m)] == i) {
      k.decommit((*prequantized)[static_cast<size_t>(m)].codes);
    }
  }
  for (size_t i = 0; i < all.size(); ++i) {
    *all[i].i8 = &quantized_[i];
    *all[i].weight = TensorView();
  }
  if (!mlp_parts.empty() && vocab_split) lm_head_part = lm_head;  // its int8 copy too
  if (mlp_rows_split_ && !mlp_parts.empty()) {  // the parts of a row split: the layers' own
    for (size_t i = 0; i < layers.size(); ++i) {
      mlp_parts[i] = {layers[i].w_gate, layers[i].w_up, layers[i].w_down};
    }
  }
}

namespace {

// The experts of layer `l` this rank holds, as stored (int8 codes plus scales, or fp32).
int64_t layer_expert_bytes(const DecoderLayerWeights& l) {
  int64_t bytes = 0;
  for (const ExpertWeights& e : l.moe.experts) {
    bytes += weight_bytes(e.w_gate, e.w_gate_i8) + weight_bytes(e.w_up, e.w_up_i8) +
             weight_bytes(e.w_down, e.w_down_i8);
  }
  return bytes;
}

}  // namespace

int64_t InferenceWeights::expert_bytes() const {
  int64_t bytes = 0;
  for (const DecoderLayerWeights& l : layers) bytes += layer_expert_bytes(l);
  return bytes;
}

int64_t InferenceWeights::bytes_per_step(bool row_split) const {
  MAXCTX_CHECK(!row_split || !mlp_parts.empty(), "these weights hold no row split");
  int64_t bytes =
      linear_bytes(row_split ? lm_head_part : lm_head) + static_cast<int64_t>(final_norm.bytes());
  for (size_t i = 0; i < layers.size(); ++i) {
    const DecoderLayerWeights& l = layers[i];
    for (const Linear* p : {&l.wq, &l.wk, &l.wv, &l.wo}) bytes += linear_bytes(*p);
    if (!l.moe.experts.empty()) {
      // Every expert this rank holds (its share when they are split over ranks: the others'
      // are empty), as a step with enough tokens reads them all.
      bytes += static_cast<int64_t>(l.moe.router.bytes()) + layer_expert_bytes(l);
    } else if (row_split) {
      const MlpRowsPart& m = mlp_parts[i];
      for (const Linear* p : {&m.w_gate, &m.w_up, &m.w_down}) bytes += linear_bytes(*p);
    } else {
      for (const Linear* p : {&l.w_gate, &l.w_up, &l.w_down}) bytes += linear_bytes(*p);
    }
    bytes += static_cast<int64_t>(l.attn_norm.bytes() + l.mlp_norm.bytes());
  }
  return bytes;
}

int64_t InferenceWeights::int8_copy_bytes() const {
  int64_t bytes = 0;
  for (const kernels::Int8Weights& w : quantized_) bytes += int8_weight_bytes(w.out_dim, w.in_dim);
  return bytes;
}

namespace {

// One buffer of the workspace: the list allocate_inference_workspace allocates from and
// inference_workspace_bytes counts.
struct WorkspaceField {
  Tensor InferenceWorkspace::*member;
  Shape shape;
  DType dtype;
};

std::vector<WorkspaceField> workspace_fields(const LlamaConfig& c, int64_t N) {
  // Activations in the activation dtype; statistics and the projections' f32 sums not.
  const DType dt = c.dtype;
  const DType f32 = DType::kF32;
  using W = InferenceWorkspace;
  return {{&W::residual, {N, c.emb_dim}, dt},
          {&W::normed, {N, c.emb_dim}, dt},
          {&W::rstd, {N}, f32},
          {&W::q, {N, c.num_query_heads, c.head_dim}, dt},
          {&W::k, {N, c.num_kv_heads, c.head_dim}, dt},
          {&W::v, {N, c.num_kv_heads, c.head_dim}, dt},
          {&W::attn, {N, c.num_query_heads, c.head_dim}, dt},
          {&W::proj, {N, c.emb_dim}, f32},
          {&W::gate, {N, c.mlp_dim}, dt},
          {&W::up, {N, c.mlp_dim}, dt},
          {&W::hidden, {N, c.mlp_dim}, dt},
          {&W::rope_cos, {N, c.head_dim / 2}, f32},
          {&W::rope_sin, {N, c.head_dim / 2}, f32},
          {&W::head_in, {N, c.emb_dim}, dt}};
}

}  // namespace

InferenceWorkspace allocate_inference_workspace(const kernels::Kernels& k, const LlamaConfig& c,
                                                int64_t max_rows) {
  MAXCTX_CHECK_GT(max_rows, 0, "an inference workspace needs at least one row");
  InferenceWorkspace ws;
  ws.max_rows = max_rows;
  for (const WorkspaceField& f : workspace_fields(c, max_rows)) {
    ws.*f.member = k.empty(f.shape, f.dtype);
  }
  if (c.moe) ws.moe = allocate_moe_buffers(k, c, 1, max_rows);
  return ws;
}

int64_t inference_workspace_resident_bytes(const kernels::Kernels& k,
                                           const InferenceWorkspace& ws) {
  const MoeBuffers& m = ws.moe;
  int64_t bytes = 0;
  for (const Tensor* t :
       {&ws.residual, &ws.normed,  &ws.rstd,         &ws.q,           &ws.k,        &ws.v,
        &ws.attn,     &ws.proj,    &ws.gate,         &ws.up,          &ws.hidden,   &ws.rope_cos,
        &ws.rope_sin, &ws.head_in, &m.router_logits, &m.router_probs, &m.expert_in, &m.gate,
        &m.up,        &m.hidden,   &m.expert_out,    &m.statistics,   &m.send_in,   &m.local_out}) {
    const TensorView v = t->view();
    if (!v.empty()) bytes += static_cast<int64_t>(k.allocator().resident_bytes(v.raw(), v.bytes()));
  }
  return bytes;
}

int64_t inference_workspace_bytes(const LlamaConfig& c, int64_t max_rows, int64_t expert_ranks) {
  int64_t bytes = 0;
  for (const WorkspaceField& f : workspace_fields(c, max_rows)) {
    bytes += f.shape.numel() * static_cast<int64_t>(dtype_size(f.dtype));
  }
  return bytes + (c.moe ? moe_buffer_bytes(c, 1, max_rows, 1, expert_ranks).per_layer : 0);
}

void llama_inference_forward(const kernels::Kernels& k, const LlamaConfig& c,
                             const InferenceWeights& w, const TokenBatch& b,
                             parallel::LayerAttention& attention, InferenceWorkspace& ws,
                             std::span<const int64_t> logit_rows, float* logits,
                             parallel::RowSplit* row_split, parallel::ExpertExchange* experts,
                             parallel::VocabSplit* vocab, parallel::TokenRowSplit* token_split) {
  const int64_t N = b.batch * b.seq;
  MAXCTX_CHECK(N > 0 && N <= ws.max_rows, "{} tokens for a workspace of {} rows", N, ws.max_rows);
  MAXCTX_CHECK_EQ(static_cast<int64_t>(w.layers.size()), c.num_layers, "weights of another model");
  if (row_split != nullptr) {
    const parallel::RowSplitPart part = row_split->part();
    MAXCTX_CHECK(!w.mlp_parts.empty() && part.rank == w.split.rank && part.ranks == w.split.ranks,
                 "a row split over {} ranks needs weights built for the same part", part.ranks);
  }
  const TensorView x = ws.residual.rows(N);
  LayerInputs inputs;
  inputs.tokens = {b.batch,           b.seq, b.positions, b.segment_ids, b.host_positions,
                   b.host_segment_ids};
  inputs.dims.heads_q = c.num_query_heads;
  inputs.dims.heads_kv = c.num_kv_heads;
  inputs.dims.head_dim = c.head_dim;
  inputs.dims.sliding_window = c.sliding_window;
  inputs.rope_cos = ws.rope_cos.rows(N);
  inputs.rope_sin = ws.rope_sin.rows(N);
  k.rope_cos_sin(inputs.rope_cos, inputs.rope_sin, b.positions, c.rope);

  // One workspace serves every layer: the stream is updated in place.
  DecoderLayerBuffers buffers;
  buffers.attn_norm_rstd = ws.rstd.rows(N);
  buffers.attn_norm_out = ws.normed.rows(N);
  buffers.q = ws.q.rows(N);
  buffers.k = ws.k.rows(N);
  buffers.v = ws.v.rows(N);
  buffers.attn_out = ws.attn.rows(N);
  buffers.proj = ws.proj.rows(N);
  buffers.mlp_norm_rstd = ws.rstd.rows(N);
  buffers.mlp_norm_out = ws.normed.rows(N);
  buffers.gate = ws.gate.rows(N);
  buffers.up = ws.up.rows(N);
  buffers.swiglu_out = ws.hidden.rows(N);
  buffers.int8_rows = &ws.int8_rows;
  buffers.split_scratch = &ws.part;
  buffers.split_hidden = &ws.hidden_part;
  buffers.split_inputs = &ws.split_inputs;
  buffers.moe = &ws.moe;
  DecoderLayerPlan plan;
  plan.kernels = &k;
  plan.attention = &attention;
  parallel::NoTensorReduction whole_layers;  // inference replicates the tensor axis' work
  plan.tensor = &whole_layers;
  plan.row_split = row_split;
  plan.experts = experts;
  plan.attention_rows_split = w.attention_rows_split();
  plan.mlp_rows_split = w.mlp_rows_split();
  plan.token_split = token_split;
  MAXCTX_CHECK(!plan.attention_rows_split || row_split != nullptr || token_split != nullptr,
               "attention weights split over ranks need a row split or a token row split");

  if (vocab != nullptr) {
    vocab->embed(x, {b.host_tokens != nullptr ? b.host_tokens : b.tokens, static_cast<size_t>(N)},
                 w.embed);
  } else {
    k.embedding_forward(x, b.tokens, w.embed);
  }
  for (int64_t l = 0; l < c.num_layers; ++l) {
    plan.mlp_part = row_split != nullptr ? &w.mlp_parts[l] : nullptr;
    decoder_layer_forward(c, l, w.layers[l], inputs, plan, x, x, x, buffers);
  }

  const int64_t R = static_cast<int64_t>(logit_rows.size());
  if (R == 0) return;
  const TensorView head_in = ws.head_in.rows(R);
  for (int64_t r = 0; r < R; ++r) {
    const int64_t row = logit_rows[r];
    MAXCTX_CHECK(row >= 0 && row < N, "logit row {} outside the batch's {} rows", row, N);
    k.copy(head_in.rows(r, r + 1), x.rows(row, row + 1));
  }
  const TensorView normed = ws.normed.rows(R);
  k.rmsnorm_forward(normed, ws.rstd.rows(R), head_in, w.final_norm, c.norm_eps);
  // The rows are computed in the backend's memory, then copied to the caller's host array once.
  // A vocabulary split without a row split gathers every rank's rows first (they differ).
  const int64_t rows = vocab != nullptr && row_split == nullptr ? vocab->part().ranks * R : R;
  k.reserve(ws.logits, rows * c.vocab_size);
  const TensorView logits_view =
      ws.logits.view().elements(0, rows * c.vocab_size).reshaped(Shape{rows, c.vocab_size});
  if (row_split != nullptr) {
    // Under a vocabulary split lm_head_part is this rank's head rows: the same gather.
    project_split(k, &ws.int8_rows, ws.part, *row_split, normed, w.lm_head_part, logits_view);
  } else if (vocab != nullptr) {
    const int64_t E = c.emb_dim, part = w.lm_head.out_dim;
    k.reserve(ws.vocab_rows, rows * E, normed.dtype());
    k.reserve(ws.vocab_part, rows * part);
    const TensorView all_rows = ws.vocab_rows.view().elements(0, rows * E).reshaped({rows, E});
    const TensorView part_logits =
        ws.vocab_part.view().elements(0, rows * part).reshaped({rows, part});
    vocab->gather_rows(all_rows, normed);
    project(k, &ws.int8_rows, all_rows, {{&w.lm_head, part_logits}});
    vocab->gather(logits_view, part_logits);
  } else {
    project(k, &ws.int8_rows, normed, {{&w.lm_head, logits_view}});
  }
  k.copy_to_host(logits, logits_view.raw(), logits_view.bytes());
}

}  // namespace maxctx::model

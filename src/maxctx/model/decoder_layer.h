// The Llama decoder layer's forward, written once for training, prefill and decode
// (gemma.cpp's single TransformerLayer): the paths cannot drift because there is one path.
//
//   x_mid = x_in + o_proj(attention(rope(q_proj(n)), rope(k_proj(n)), v_proj(n)))
//                                                              n = rmsnorm(x_in)
//   x_out = x_mid + down_proj(silu(gate_proj(m)) · up_proj(m))   m = rmsnorm(x_mid)
//
// What differs between the callers comes in through the plan, never through a branch on the
// caller: how attention reaches its keys (training's context-parallel plan, prefill's gather
// into the KV cache, decode's merge over cache shards), the tensor-axis sum after the
// row-parallel projections, and inference's row split of the MLP. Projections are fp32 views or
// int8 packed copies (inference's quantization=int8); q, k and v share one quantization of their
// input. Buffers are the caller's: training passes each layer's saved activations, inference one
// workspace reused by every layer (x_in, x_mid and x_out one buffer). Nothing is allocated here
// except a row split's scratch, which grows once to its largest use.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <utility>

#include "maxctx/core/tensor.h"
#include "maxctx/kernels/kernels.h"
#include "maxctx/model/llama_config.h"
#include "maxctx/model/moe_block.h"
#include "maxctx/model/remat.h"
#include "maxctx/parallel/model_plan.h"

namespace maxctx::model {

// One projection (out_dim, in_dim) as nn.Linear stores it: fp32 weights (a view), or their int8
// copy (per-output-channel scales), which is then what the forward reads.
struct Linear {
  TensorView weight;                         // (out_dim, in_dim) fp32; empty when i8 is set
  const kernels::Int8Weights* i8 = nullptr;  // the packed int8 copy, or null
  int64_t out_dim = 0;
  int64_t in_dim = 0;
};
Linear linear_of(TensorView weight);  // (out_dim, in_dim) from the view's shape; empty: empty

// The weights one layer's forward reads.
struct DecoderLayerWeights {
  TensorView attn_norm;  // (E)
  Linear wq, wk, wv, wo;
  TensorView mlp_norm;          // (E)
  Linear w_gate, w_up, w_down;  // empty in a mixture of experts
  MoeLayerWeights moe;          // decoder_block mixtral: the router and experts
};

// One rank's rows of a layer's MLP projections under a row split (parallel::RowSplit).
struct MlpRowsPart {
  Linear w_gate, w_up;  // rows [split_offset(F), + split_count(F)): this rank's hidden units
  Linear w_down;        // rows [split_offset(E), + split_count(E))
};

// The views one layer's forward writes, N = B·S rows (legend of activations.h).
struct DecoderLayerBuffers {
  TensorView attn_norm_rstd;  // (N)
  TensorView attn_norm_out;   // (N, E)
  TensorView q;               // (N, Hq, D)
  TensorView k;               // (N, Hkv, D)
  TensorView v;               // (N, Hkv, D)
  TensorView attn_out;        // (N, Hq, D)
  TensorView lse;             // (B, Hq, S) or empty
  TensorView proj;            // (N, E) o_proj / down_proj output before the residual add
  TensorView mlp_norm_rstd;   // (N)
  TensorView mlp_norm_out;    // (N, E)
  TensorView gate;            // (N, F) (F this rank's hidden units under a split)
  TensorView up;              // (N, F)
  TensorView swiglu_out;      // (N, F) the whole hidden layer (gathered under a row split)
  kernels::Int8Rows* int8_rows = nullptr;  // a projection input quantized (int8 weights only)
  Tensor* split_scratch = nullptr;         // (N, rows) a row split's f32 part (row split only)
  Tensor* split_hidden = nullptr;          // (N, Fr) this rank's hidden units (row split only)
  Tensor* split_inputs = nullptr;          // (ranks·N, in) every rank's rows (token split only)
  MoeBuffers* moe = nullptr;               // a mixture of experts' state (mixtral only)
};

// Everything about the layer's surroundings: the backend, the attention, the tensor-axis sum,
// and (decode with a sequence-sharded cache) the MLP's row split with this rank's rows.
struct DecoderLayerPlan {
  const kernels::Kernels* kernels = nullptr;
  parallel::LayerAttention* attention = nullptr;
  parallel::TensorReducer* tensor = nullptr;
  parallel::RowSplit* row_split = nullptr;  // null: every rank computes its whole MLP
  const MlpRowsPart* mlp_part = nullptr;    // this layer's rows under row_split
  // Inference with the attention projections stored split over an axis (issue #31: each weight
  // once across context_autoregressive): the layer's wq, wk, wv, wo are this rank's rows,
  // computed through row_split when every rank holds the same tokens (a sequence-sharded
  // decode), else through token_split.
  bool attention_rows_split = false;
  // The same for a dense MLP's gate, up and down (its row_split path reads mlp_part).
  bool mlp_rows_split = false;
  parallel::TokenRowSplit* token_split = nullptr;

  // Training under context parallelism: ModelPlan::sequence (a mixture of experts' statistics).
  parallel::TensorReducer* sequence = nullptr;
  // Training under the expert axis: ModelPlan::experts (a mixture of experts' row exchange).
  parallel::ExpertExchange* experts = nullptr;
  // Training under context parallelism: ModelPlan::chunks (dense MoE dispatch with dropping).
  parallel::SequenceChunks* chunks = nullptr;
};

// Rotary position embedding tables and the attention dims for a batch (computed once, shared by
// every layer).
struct LayerInputs {
  parallel::TokenLayout tokens;
  kernels::AttentionParams dims;  // this rank's Hq, Hkv, D, window
  TensorView rope_cos;            // (N, D/2)
  TensorView rope_sin;            // (N, D/2)
};

// x_out (N, E) = the layer applied to x_in (N, E), the stream after attention left in x_mid
// (N, E) (training keeps it for backward); inference passes one buffer as all three.
void decoder_layer_forward(const LlamaConfig& config, int64_t layer,
                           const DecoderLayerWeights& weights, const LayerInputs& inputs,
                           const DecoderLayerPlan& plan, TensorView x_in, TensorView x_mid,
                           TensorView x_out, DecoderLayerBuffers& buffers);

// Training's backward under a remat policy (model/remat.h): the layer's forward again from x_in,
// computing into `buffers` only what the policy did not keep (the norms and SwiGLU always, the
// projections, attention and o_proj's residual add into x_mid when not kept; never down_proj,
// whose sum is the next layer's input, kept by every policy). Same kernels, same inputs: the
// same bits as the forward. No row split (training has none).
void decoder_layer_recompute(const LlamaConfig& config, int64_t layer,
                             const DecoderLayerWeights& weights, const LayerInputs& inputs,
                             const DecoderLayerPlan& plan, const RematPolicy& kept, TensorView x_in,
                             TensorView x_mid, DecoderLayerBuffers& buffers);

// outs[i].second = in · outs[i].first ᵀ for projections that share one input (int8 quantizes it
// once into `int8_rows`).
void project(const kernels::Kernels& k, kernels::Int8Rows* int8_rows, TensorView in,
             std::initializer_list<std::pair<const Linear*, TensorView>> outs);

// A row split's part of a projection: this rank's rows (part) of in (N, in_dim) · Wᵀ into
// `scratch`, then every rank's rows gathered into out (N, out_dim).
void project_split(const kernels::Kernels& k, kernels::Int8Rows* int8_rows, Tensor& scratch,
                   parallel::RowSplit& split, TensorView in, const Linear& part, TensorView out);

}  // namespace maxctx::model

// Saved activations and backward workspace of the Llama model for one micro-batch on this rank.
//
// Legend: N = B·S tokens on this rank, E emb_dim, Hq/Hkv this rank's query/kv heads (after the
// tensor split), D head_dim, F this rank's mlp width, V vocab. Allocated once for a fixed
// (B, S) through the backend the model runs on; forward fills them, backward reads them. Nothing
// is allocated per step. Saved activations are in the config's activation dtype (bf16 halves
// them); rstd, lse, logits, the loss, proj and the backward workspace are f32.
#pragma once

#include <vector>

#include "maxctx/core/tensor.h"
#include "maxctx/kernels/kernels.h"
#include "maxctx/model/llama_config.h"
#include "maxctx/model/moe_block.h"

namespace maxctx::model {

struct LayerActivations {
  Tensor attn_norm_rstd;  // (N) 1/rms of the layer input
  Tensor attn_norm_out;   // (N, E)
  Tensor q;               // (N, Hq, D) after RoPE
  Tensor k;               // (N, Hkv, D) after RoPE
  Tensor v;               // (N, Hkv, D)
  Tensor attn_out;        // (N, Hq, D) softmax(q·kᵀ)·v, before o_proj
  Tensor lse;             // (B, Hq, S) log-sum-exp per query row
  Tensor mlp_norm_rstd;   // (N)
  Tensor mlp_norm_out;    // (N, E)
  Tensor gate;            // (N, F) x·W_gateᵀ
  Tensor up;              // (N, F) x·W_upᵀ
  Tensor swiglu_out;      // (N, F) silu(gate)·up
  MoeBuffers moe;         // a mixture of experts' routing and expert rows (mixtral only)
};

struct LlamaActivations {
  int64_t batch = 0;  // B
  int64_t seq = 0;    // S, this rank's tokens per sequence
  Tensor rope_cos;    // (N, D/2)
  Tensor rope_sin;    // (N, D/2)
  // residual[l] is the input of layer l, residual[L] the output of the last layer;
  // residual_mid[l] is layer l's stream after attention, before the MLP.
  std::vector<Tensor> residual;      // L+1 × (N, E)
  std::vector<Tensor> residual_mid;  // L × (N, E)
  std::vector<LayerActivations> layers;
  Tensor final_norm_rstd;  // (N)
  Tensor final_norm_out;   // (N, E)
  Tensor logits;           // (N, V); overwritten by d_logits in backward
  Tensor xent_lse;         // (N)
  Tensor token_loss;       // (N) weight · cross-entropy
  Tensor proj;             // (N, E) o_proj / down_proj output before its residual add

  // Backward workspace.
  Tensor d_residual;  // (N, E) gradient of the stream
  Tensor d_normed;    // (N, E) gradient of a norm's output
  Tensor d_x;         // (N, E) gradient of a norm's input
  Tensor d_q;         // (N, Hq, D)
  Tensor d_k;         // (N, Hkv, D)
  Tensor d_v;         // (N, Hkv, D)
  Tensor d_attn;      // (N, Hq, D)
  Tensor d_gate;      // (N, F)
  Tensor d_up;        // (N, F)
  Tensor d_swiglu;    // (N, F)

  MoeGradBuffers moe_grad;  // a mixture of experts' backward workspace (mixtral only)
};

LlamaActivations allocate_activations(const kernels::Kernels& kernels, const LlamaConfig& config,
                                      int64_t batch, int64_t seq, int tensor_size = 1);

}  // namespace maxctx::model

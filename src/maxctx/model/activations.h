// Saved activations and backward workspace of the Llama model for one micro-batch on this rank.
//
// Legend: N = B·S tokens on this rank, E emb_dim, Hq/Hkv this rank's query/kv heads (after the
// tensor split), D head_dim, F this rank's mlp width, V vocab. Allocated once for a fixed
// (B, S) through the backend the model runs on; forward fills them, backward reads them. Nothing
// is allocated per step. Saved activations are in the config's activation dtype (bf16 halves
// them); rstd, lse, logits, the loss, proj and the backward workspace are f32.
//
// The remat policy (model/remat.h) decides which of a layer's views are its own and which are
// one scratch set shared by every layer: the forward writes the shared ones and the next layer
// overwrites them; the backward recomputes them for the layer it is at. Bytes per token and
// layer under each policy: docs/architecture.md "Activation memory".
#pragma once

#include <vector>

#include "maxctx/core/tensor.h"
#include "maxctx/kernels/host_transfer.h"
#include "maxctx/kernels/kernels.h"
#include "maxctx/model/llama_config.h"
#include "maxctx/model/moe_block.h"
#include "maxctx/model/remat.h"

namespace maxctx::model {

// This rank's share of the model's dimensions (the legend above; heads and the mlp width split
// over tensor), read by the allocation and by the model's forward and backward.
struct LocalDims {
  int64_t N, E, Hq, Hkv, D, F;
};
LocalDims local_dims(const LlamaConfig& config, int64_t batch, int64_t seq, int tensor_size);

// Views into LlamaActivations::storage: the layer's own buffers or the shared scratch set.
struct LayerActivations {
  TensorView attn_norm_rstd;  // (N) 1/rms of the layer input
  TensorView attn_norm_out;   // (N, E)
  TensorView q;               // (N, Hq, D) after RoPE
  TensorView k;               // (N, Hkv, D) after RoPE
  TensorView v;               // (N, Hkv, D)
  TensorView attn_out;        // (N, Hq, D) softmax(q·kᵀ)·v, before o_proj
  TensorView lse;             // (B, Hq, S) log-sum-exp per query row
  TensorView residual_mid;    // (N, E) the stream after attention, before the MLP
  TensorView mlp_norm_rstd;   // (N)
  TensorView mlp_norm_out;    // (N, E)
  TensorView gate;            // (N, F) x·W_gateᵀ (dense MLP only)
  TensorView up;              // (N, F) x·W_upᵀ (dense MLP only)
  TensorView swiglu_out;      // (N, F) silu(gate)·up (dense MLP only)
  // A mixture of experts' routing and expert rows (mixtral only; then gate, up and swiglu_out
  // are empty): owned per layer, kept by every remat policy (a recomputation redoes the norm
  // before it, not the experts).
  MoeBuffers moe;
};

// What remat_policy=custom keeps in host memory (model/remat.h), on a device backend: each
// offloaded view's copy per layer, and the layers' inputs.
struct OffloadedActivations {
  struct Field {
    TensorView LayerActivations::*member;
    std::vector<Tensor> host;  // [layer], host memory
  };
  std::vector<Field> fields;
  std::vector<Tensor> layer_inputs;  // [l] = the input of layer l (l < L), host memory
};

struct LlamaActivations {
  int64_t batch = 0;  // B
  int64_t seq = 0;    // S, this rank's tokens per sequence
  Tensor rope_cos;    // (N, D/2)
  Tensor rope_sin;    // (N, D/2)
  // What each layer keeps, and where; the backward recomputes the rest. Offloads only on a
  // device backend (remat.h: on the cpu, offloaded tensors are kept where they are).
  RematPolicy remat;
  // The layers' inputs (kept by every policy) and the last layer's output, L+1 × (N, E):
  // residual[l] is the input of layer l. With remat.offloaded.layer_input, two buffers the layers
  // take turns in (layer_input() says which), the inputs waiting in offloaded.layer_inputs.
  std::vector<Tensor> residual;
  std::vector<LayerActivations> layers;
  std::vector<Tensor> storage;  // what the layers' views point into
  OffloadedActivations offloaded;
  Tensor final_norm_rstd;  // (N)
  Tensor final_norm_out;   // (N, E)
  // (logit_rows(N, config.vocab_tiles), V): all N rows untiled, kept from the forward for the
  // backward, which overwrites them with d_logits; one tile's rows under num_vocab_tiling.
  Tensor logits;
  Tensor xent_lse;    // (N)
  Tensor token_loss;  // (N) weight · cross-entropy
  // The forward's readouts on the backend (the loss sum, each tile's accuracy hits), read back
  // once per forward (llama.h).
  kernels::DeviceDoubles readout;
  Tensor proj;  // (N, E) o_proj / down_proj output before its residual add

  // Backward workspace.
  Tensor d_residual;  // (N, E) gradient of the stream
  Tensor d_normed;    // (N, E) gradient of a norm's output
  Tensor d_x;         // (N, E) gradient of a norm's input
  Tensor d_q;         // (N, Hq, D)
  Tensor d_k;         // (N, Hkv, D)
  Tensor d_v;         // (N, Hkv, D)
  Tensor d_attn;      // (N, Hq, D)
  Tensor d_gate;      // (N, F) dense MLP only
  Tensor d_up;        // (N, F) dense MLP only
  Tensor d_swiglu;    // (N, F) dense MLP only

  MoeGradBuffers moe_grad;  // a mixture of experts' backward workspace (mixtral only)
};

// The input of layer l (l = L: the last layer's output) on the backend.
TensorView layer_input(LlamaActivations& activations, int64_t layer);

// Host offload (remat.h), each a no-op for what the policy keeps on the device: layer l's input
// to the host once it is written (before the layer that would overwrite its buffer); layer l's
// offloaded views after its forward (before the next layer overwrites their shared buffers);
// and both back before layer l's backward. The copies are ordered on the backend's stream with
// the ops around them; restore_layer reads host memory, so the backward begins with one
// synchronize() (begin_backward) that lands every offload of the forward.
void offload_layer_input(const kernels::Kernels& kernels, LlamaActivations& activations,
                         int64_t layer);
void offload_layer(const kernels::Kernels& kernels, LlamaActivations& activations, int64_t layer);
void begin_backward(const kernels::Kernels& kernels, const LlamaActivations& activations);
void restore_layer(const kernels::Kernels& kernels, LlamaActivations& activations, int64_t layer);

// Rows of one loss tile of N tokens in `vocab_tiles` tiles: ceil(N / vocab_tiles) (the last tile
// may be shorter when the tiles do not divide N).
int64_t logit_rows(int64_t tokens, int64_t vocab_tiles);

// `remat`: which layer activations are kept for the backward (default: all of them).
LlamaActivations allocate_activations(const kernels::Kernels& kernels, const LlamaConfig& config,
                                      int64_t batch, int64_t seq, int tensor_size = 1,
                                      const RematPolicy& remat = {}, int64_t context = 1);

// Every byte `activations` holds now on its backend (each buffer once, the MoE buffers
// included), counted from the buffers themselves: what the test of activation_bytes_per_token
// and of `maxctx plan` compares with. offloaded_bytes: those it holds in host memory.
int64_t allocated_bytes(const LlamaActivations& activations);
int64_t offloaded_bytes(const LlamaActivations& activations);

// Bytes of the layers' saved activations per token (summed over layers, the shared scratch set
// counted once) and of everything else allocate_activations holds per token, for `remat`. A
// mixture of experts' buffers (MoeBuffers, MoeGradBuffers: their rows follow the dispatch, not
// the token count alone) are not counted.
struct ActivationBytes {
  int64_t layers_per_token = 0;     // L × what one layer keeps, + one scratch set
  int64_t other_per_token = 0;      // stream, final norm, loss, RoPE tables, backward workspace
  int64_t offloaded_per_token = 0;  // in host memory: L × what one layer offloads, its inputs
  int64_t logits_per_row = 0;       // V f32: the logits buffer, logit_rows(N, vocab_tiles) rows
  // Everything but the layers' activations for N tokens in `vocab_tiles` loss tiles.
  int64_t other_bytes(int64_t tokens, int64_t vocab_tiles) const;
};
// `remat` as the backend keeps it (without_offload on the cpu, as allocate_activations does).
ActivationBytes activation_bytes_per_token(const LlamaConfig& config, const RematPolicy& remat,
                                           int tensor_size = 1);

}  // namespace maxctx::model

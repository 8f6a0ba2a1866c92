// The Llama decoder, forward and backward, as explicit calls over preallocated state.
//
// A decoder layer is: rmsnorm -> q/k/v projections -> RoPE -> attention (through the plan) ->
// o_proj -> residual add -> rmsnorm -> gate/up -> SwiGLU -> down -> residual add. Weights,
// activations and gradients are passed in; nothing is allocated here. Parallelism enters only
// through the ModelPlan: the attention plan (context = 1 or context parallel) and the tensor
// reducer after row-parallel projections. The loss is Σ weight_i · xent_i over this rank's
// tokens; the caller divides by the global Σ weight (through d_loss in backward), so sharded and
// unsharded runs compute the same mean.
//
// The output head and the loss run over config.vocab_tiles tiles of the rank's N tokens (MaxText's
// num_vocab_tiling: tiles of batch x sequence, each with the whole vocabulary), so the logits
// buffer holds ceil(N / tiles) rows, never N x V at once. Untiled, the forward keeps the logits
// for the backward; tiled, llama_forward_backward computes each tile's logits once (the loss, the
// hits and d_logits from the same rows), while a separate llama_backward computes them
// again. Every row's loss and d_logits are the same bits tiled or not (a row's logits do not
// depend on the other rows); the head's weight gradient sums the tiles' products in another
// order (equal within float rounding, ~1e-7 relative).
#pragma once

#include <cstdint>

#include "maxctx/model/activations.h"
#include "maxctx/model/weights.h"
#include "maxctx/parallel/model_plan.h"

namespace maxctx::model {

// This rank's tokens, (B, S) row-major int32 unless noted, in the backend's memory (the
// kernels read them).
struct TokenBatch {
  int64_t batch = 0;
  int64_t seq = 0;
  const int32_t* tokens = nullptr;
  const int32_t* targets = nullptr;      // may be null for a logits-only forward
  const int32_t* positions = nullptr;    // each token's position in its document
  const int32_t* segment_ids = nullptr;  // attention mask: equal ids attend; 0 = padding
  const float* loss_weights = nullptr;   // (B·S) 0 = not scored; may be null with targets null
  // Host copies of positions, segment ids and loss weights, for what the host computes from them
  // (the context plans' id exchange, the loss's weight sum); null: the backend's memory is the
  // host's and the pointers above serve.
  const int32_t* host_positions = nullptr;
  const int32_t* host_segment_ids = nullptr;
  const float* host_loss_weights = nullptr;
  const int32_t* host_tokens = nullptr;  // inference's vocabulary split looks them up by rank
};

struct LossSums {
  double loss_sum = 0.0;    // Σ weight · cross-entropy over this rank's tokens
  double weight_sum = 0.0;  // Σ weight
  // Mixture of experts with load_balance_loss_weight > 0: Σ over layers and this rank's
  // sequences of the per-sequence load-balance terms (moe_block.h); MaxText's moe_lb_loss is
  // the sum over all ranks times moe_lb_scale.
  double moe_lb_sum = 0.0;
  // Mixture of experts: (token, choice) pairs dense dispatch dropped, summed over layers.
  int64_t moe_dropped = 0;
  // With count_hits: this rank's tokens of weight ≠ 0 (scored) and those whose first arg max
  // over the vocabulary is their target (correct), the accuracy metric's counts, exact.
  double correct = 0.0;
  double scored = 0.0;
};

// moe_lb_loss = moe_lb_scale · Σ moe_lb_sum: MaxText's mean over layers of each layer's mean
// over the global batch's `global_sequences` sequences. Also the backward's d_moe_lb.
double moe_lb_scale(const LlamaConfig& config, int64_t global_sequences);

// Fills `acts` and returns the loss sums (zero when batch.targets is null). A forward without
// targets (logits only) needs vocab_tiles = 1 and leaves all N rows of logits in acts.logits.
// The sums are computed on the backend (kernel_ops.inc's readouts: the loss sum in token order,
// and with count_hits the accuracy's hits tile by tile) and read back once, at the end.
LossSums llama_forward(const LlamaConfig& config, const LlamaWeights& weights,
                       const TokenBatch& batch, parallel::ModelPlan& plan, LlamaActivations& acts,
                       bool count_hits = false);

// Accumulates (+=) the gradient of d_loss · Σ weight·xent + d_moe_lb · moe_lb_sum into `grads`
// (a LlamaWeights bound to the gradient buffer). Needs the activations of the llama_forward
// call on the same batch; overwrites acts.logits with d_logits.
void llama_backward(const LlamaConfig& config, const LlamaWeights& weights,
                    const LlamaWeights& grads, const TokenBatch& batch, parallel::ModelPlan& plan,
                    LlamaActivations& acts, float d_loss, float d_moe_lb = 0.0f);

// llama_forward then llama_backward (same sums and gradients), with the sums' one readback after
// the backward; with vocab_tiles > 1 each tile's head forward, loss and head backward run back
// to back, so the logits of a tile are computed once and the head's weights are gathered once
// (fsdp) for both.
LossSums llama_forward_backward(const LlamaConfig& config, const LlamaWeights& weights,
                                const LlamaWeights& grads, const TokenBatch& batch,
                                parallel::ModelPlan& plan, LlamaActivations& acts, float d_loss,
                                float d_moe_lb = 0.0f, bool count_hits = false);

}  // namespace maxctx::model

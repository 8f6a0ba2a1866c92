// The Llama decoder for inference: prefill and decode as one forward over a KV cache.
//
// Prefill (the prompt) and a decode step (one new token per slot) run the same decoder layer as
// model/llama.cpp's training forward (model/decoder_layer.h: one function), so an fp32
// prefill's logits equal llama_forward's for the same tokens. They differ only in how attention
// reaches its keys, which is the caller's LayerAttention: prefill attends among the prompt's
// tokens (all-gathered over context_autoregressive) and keeps this rank's K/V in the cache;
// decode appends the new K/V to the cache and attends to it (partials merged across shards).
// The model never sees the mesh or the cache layout. Nothing is allocated per call: state lives
// in InferenceWorkspace. Only the rows asked for get the final norm and the output head (a
// decode step wants every slot's row, a prefill only each prompt's last token).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "maxctx/core/tensor.h"
#include "maxctx/kernels/kernels.h"
#include "maxctx/model/decoder_layer.h"
#include "maxctx/model/llama.h"

namespace maxctx::model {

// One projection of a checkpoint saved already quantized (checkpoint_is_quantized): its int8
// codes and per-row scales, and the region of the weight buffer it stands for (which holds no
// values: the forward reads only the int8 copy).
struct QuantizedMatrix {
  TensorView region;  // (out, in) in the LlamaWeights' buffer
  TensorView codes;   // (out, in) int8
  TensorView scale;   // (out) f32
};

// What an int8 copy of an (out_dim, in_dim) projection streams per use: its codes and two f32
// per row (the scale and the row sum the int8 matmul corrects with).
int64_t int8_weight_bytes(int64_t out_dim, int64_t in_dim);

// The weights inference reads. Views the training layout (LlamaWeights, which must outlive this);
// with quantize_int8 every projection (a mixture's experts too) and the output head get an int8
// copy, which is then what the forward reads (the embedding lookup, the norms and a mixture's
// router stay fp32). With a row split of more than one rank it also holds this rank's rows of
// the dense MLP's projections (a mixture of experts is not split) and of the output head, which
// a forward given a RowSplit reads instead: the weights themselves when they are stored split
// (inference_weight_specs under context_autoregressive: mlp_rows_split, the vocabulary split),
// else views of the fp32 rows or int8 copies of them (per-row scales: the whole matrix's codes).
class InferenceWeights {
 public:
  // With `prequantized` (quantize_int8 must be set) every projection is packed from its codes
  // and scales there instead of quantized from the weights: the same int8 copy, bit for bit,
  // when they came from the same weights.
  // With vocab_split the embedding and head in `weights` are this rank's rows of them (the
  // vocabulary split over the row split's axis): the head's row split part is the head itself.
  InferenceWeights(const kernels::Kernels& kernels, const LlamaConfig& config,
                   const LlamaWeights& weights, bool quantize_int8,
                   parallel::RowSplitPart split = {},
                   const std::vector<QuantizedMatrix>* prequantized = nullptr,
                   bool vocab_split = false);
  InferenceWeights(const InferenceWeights&) = delete;
  InferenceWeights& operator=(const InferenceWeights&) = delete;

  bool int8() const { return !quantized_.empty(); }
  // Whether the attention projections are this rank's rows of them (stored split over
  // context_autoregressive, infer::inference_weight_specs), which a forward then computes
  // through a row split or a token row split.
  bool attention_rows_split() const { return attention_rows_split_; }
  // The same for a dense MLP's projections (mlp_parts are then the layers' own weights).
  bool mlp_rows_split() const { return mlp_rows_split_; }
  // Bytes one decode step streams: every projection and the head as stored (int8 codes plus
  // scales, or fp32), the norms, and one embedding row per token is not counted. With
  // row_split, the MLP and head rows of this rank's part instead of the whole matrices. Only
  // the experts this rank holds (infer/model_source.h inference_weight_specs) are counted.
  int64_t bytes_per_step(bool row_split = false) const;
  // The experts this rank holds, as stored (bytes_per_step's part of them).
  int64_t expert_bytes() const;
  // The int8 copies this holds (codes and scales as int8_weight_bytes counts them), as packed.
  int64_t int8_copy_bytes() const;

  TensorView embed;       // (V, E)
  TensorView final_norm;  // (E)
  Linear lm_head;         // (V, E)
  std::vector<DecoderLayerWeights> layers;

  parallel::RowSplitPart split;
  Linear lm_head_part;                 // rows [split_offset(V), + split_count(V))
  std::vector<MlpRowsPart> mlp_parts;  // per layer; empty without a split

 private:
  std::vector<kernels::Int8Weights> quantized_;
  bool attention_rows_split_ = false;
  bool mlp_rows_split_ = false;
};

// Buffers of one forward of up to max_rows tokens (N = B·S rows, legend of activations.h).
struct InferenceWorkspace {
  int64_t max_rows = 0;
  Tensor residual;              // (N, E) the stream
  Tensor normed;                // (N, E) a norm's output, the projections' input
  Tensor rstd;                  // (N)
  Tensor q;                     // (N, Hq, D)
  Tensor k;                     // (N, Hkv, D)
  Tensor v;                     // (N, Hkv, D)
  Tensor attn;                  // (N, Hq, D)
  Tensor proj;                  // (N, E) o_proj / down_proj output before the residual add
  Tensor gate;                  // (N, F)
  Tensor up;                    // (N, F)
  Tensor hidden;                // (N, F) silu(gate)·up
  Tensor rope_cos;              // (N, D/2)
  Tensor rope_sin;              // (N, D/2)
  Tensor head_in;               // (N, E) the rows that get logits, gathered
  kernels::Int8Rows int8_rows;  // a projection input, quantized
  Tensor part;                  // (N, rows) a row split's f32 part, before its gather
  Tensor hidden_part;           // (N, Fr) a row split's hidden units, before their gather
  Tensor split_inputs;          // (ranks·N, in) every rank's rows, a token row split's input
  MoeBuffers moe;               // a mixture of experts' state, reused by every layer
  Tensor logits;                // (R, V) f32 the logit rows before their copy to the host
                                // (grown to the most rows asked for; not in the plan's count)
  Tensor vocab_rows;            // (ca·R, E) every rank's head rows, under a vocabulary split
  Tensor vocab_part;            // (ca·R, V/ca) f32 this rank's part of their logits
};

InferenceWorkspace allocate_inference_workspace(const kernels::Kernels& kernels,
                                                const LlamaConfig& config, int64_t max_rows);
// The pages of the workspace's buffers the device holds now (Allocator::resident_bytes: on the
// host, those a forward has written), a measurement of what the forwards so far used: the
// buffers inference_workspace_bytes counts (not the logit rows, grown to what is asked).
int64_t inference_workspace_resident_bytes(const kernels::Kernels& kernels,
                                           const InferenceWorkspace& ws);
// The bytes allocate_inference_workspace holds for `max_rows` rows (with a mixture's buffers and
// the load-balance statistics its forward adds), for `maxctx plan`.
// With a mixture's experts split over `expert_ranks` ranks, the expert exchange's buffers too
// (the rows received counted as the mean, what every rank sends: moe_buffer_bytes).
int64_t inference_workspace_bytes(const LlamaConfig& config, int64_t max_rows,
                                  int64_t expert_ranks = 1);

// Runs the decoder over this rank's tokens (batch.targets is ignored) and writes the logits of
// rows logit_rows (indices into the B·S rows, in the order given) to logits (rows, V). With
// row_split (every rank of it running the same tokens; weights built with the same part) the
// MLP and the head are split over its ranks. With `experts` (a mixture of experts whose
// experts are split over the axis: every rank of it calls this with its own tokens, or the
// same ones) each rank runs only its experts' rows, exchanged with the others. With `vocab`
// (weights built with vocab_split: each rank holds its rows of the embedding and head) the
// embedding rows come from the ranks that hold them (batch.host_tokens), and without a row split
// (the ranks' rows differ) every rank's logit rows are gathered: `logits` then receives
// (ranks · R, V), every rank's R rows rank by rank (R the same on every rank). With weights whose
// attention projections are split (attention_rows_split), each rank's rows of them computed
// through row_split when given (the same tokens on every rank), else through token_split.
void llama_inference_forward(const kernels::Kernels& kernels, const LlamaConfig& config,
                             const InferenceWeights& weights, const TokenBatch& batch,
                             parallel::LayerAttention& attention, InferenceWorkspace& ws,
                             std::span<const int64_t> logit_rows, float* logits,
                             parallel::RowSplit* row_split = nullptr,
                             parallel::ExpertExchange* experts = nullptr,
                             parallel::VocabSplit* vocab = nullptr,
                             parallel::TokenRowSplit* token_split = nullptr);

}  // namespace maxctx::model

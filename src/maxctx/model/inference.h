// The Llama decoder for inference: prefill and decode as one forward over a KV cache.
//
// Prefill (the prompt) and a decode step (one new token per slot) run the same layer stack as
// model/llama.cpp's training forward, with the same kernels in the same order, so an fp32
// prefill's logits equal llama_forward's for the same tokens. They differ only in how attention
// reaches its keys, which is the caller's InferenceAttention: prefill attends among the prompt's
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
#include "maxctx/kernels/cpu/int8.h"
#include "maxctx/model/llama.h"

namespace maxctx::model {

// One projection (out_dim, in_dim) as nn.Linear stores it: the fp32 weights in place, or their
// int8 copy (per-output-channel scales, kernels/cpu/int8.h).
struct InferenceLinear {
  const float* f32 = nullptr;
  const kernels::cpu::Int8Weights* i8 = nullptr;
  int64_t out_dim = 0;
  int64_t in_dim = 0;
};

struct InferenceLayer {
  const float* attn_norm;  // (E)
  InferenceLinear wq, wk, wv, wo;
  const float* mlp_norm;  // (E)
  InferenceLinear w_gate, w_up, w_down;
};

// One rank's rows of a layer's MLP projections under a RowSplit (see below).
struct InferenceMlpPart {
  InferenceLinear w_gate, w_up;  // rows [split_offset(F), + split_count(F)): its hidden units
  InferenceLinear w_down;        // rows [split_offset(E), + split_count(E))
};

// Which part of a row split this rank computes: `ranks` ranks hold the same tokens, and rank
// `rank` computes rows split_offset(out_dim, ranks, rank) .. + split_count(...) of a projection.
struct RowSplitPart {
  int rank = 0;
  int ranks = 1;
};

// The weights inference reads. Views the training layout (LlamaWeights, which must outlive this);
// with quantize_int8 every projection and the output head get an int8 copy, which is then what
// the forward reads (the embedding lookup and the norms stay fp32). With a row split of more
// than one rank it also holds this rank's rows of the MLP projections and of the output head
// (views of the fp32 rows, or int8 copies of them: per-row scales, so the same codes as the
// whole matrix's), which a forward given a RowSplit reads instead.
class InferenceWeights {
 public:
  InferenceWeights(const LlamaConfig& config, const LlamaWeights& weights, bool quantize_int8,
                   RowSplitPart split = {});
  InferenceWeights(const InferenceWeights&) = delete;
  InferenceWeights& operator=(const InferenceWeights&) = delete;

  bool int8() const { return !quantized_.empty(); }
  // Bytes one decode step streams: every projection and the head as stored (int8 codes plus
  // scales, or fp32), the norms, and one embedding row per token is not counted. With
  // row_split, the MLP and head rows of this rank's part instead of the whole matrices.
  int64_t bytes_per_step(bool row_split = false) const;

  const float* embed;       // (V, E)
  const float* final_norm;  // (E)
  InferenceLinear lm_head;  // (V, E)
  std::vector<InferenceLayer> layers;

  RowSplitPart split;
  InferenceLinear lm_head_part;             // rows [split_offset(V), + split_count(V))
  std::vector<InferenceMlpPart> mlp_parts;  // per layer; empty without a split

 private:
  std::vector<kernels::cpu::Int8Weights> quantized_;
};

// A decode step in which every rank of an axis holds the same tokens (decode with the KV cache
// sharded along the sequence) need not read every weight on every rank: attention's projections
// stay replicated (MaxText's inference rule), but each rank computes only its part of the MLP's
// hidden units, of the MLP's output and of the logits, and `gather` assembles each from the
// parts. Every output element is one dot product over the whole input, as without the split
// (no partial sums to add, the int8 codes and scales unchanged), and each rank streams 1/ranks
// of the MLP and head weights per step.
class RowSplit {
 public:
  virtual ~RowSplit() = default;
  virtual RowSplitPart part() const = 0;
  // out (N, out_dim) from every rank's mine (N, split_count(out_dim, ranks, rank)).
  virtual void gather(float* out, const float* mine, int64_t N, int64_t out_dim) = 0;
};

// How one layer's attention reaches its keys. q, out (B, S, Hq, D) and k, v (B, S, Hkv, D) are
// this rank's tokens after RoPE; `dims` carries the heads, head_dim and window.
class InferenceAttention {
 public:
  virtual ~InferenceAttention() = default;
  virtual void forward(int64_t layer, float* out, const float* q, const float* k, const float* v,
                       const parallel::TokenLayout& tokens,
                       const kernels::AttentionParams& dims) = 0;
};

// Buffers of one forward of up to max_rows tokens (N = B·S rows, legend of activations.h).
struct InferenceWorkspace {
  int64_t max_rows = 0;
  Tensor residual;                   // (N, E) the stream
  Tensor normed;                     // (N, E) a norm's output, the projections' input
  Tensor rstd;                       // (N)
  Tensor q;                          // (N, Hq, D)
  Tensor k;                          // (N, Hkv, D)
  Tensor v;                          // (N, Hkv, D)
  Tensor attn;                       // (N, Hq, D)
  Tensor proj;                       // (N, E) o_proj / down_proj output before the residual add
  Tensor gate;                       // (N, F)
  Tensor up;                         // (N, F)
  Tensor hidden;                     // (N, F) silu(gate)·up
  Tensor rope_cos;                   // (N, D/2)
  Tensor rope_sin;                   // (N, D/2)
  Tensor head_in;                    // (N, E) the rows that get logits, gathered
  kernels::cpu::Int8Rows int8_rows;  // a projection input, quantized
  std::vector<float> part;           // (N, rows) a row split's part, before its gather
};

InferenceWorkspace allocate_inference_workspace(const LlamaConfig& config, int64_t max_rows);

// Runs the decoder over this rank's tokens (batch.targets is ignored) and writes the logits of
// rows logit_rows (indices into the B·S rows, in the order given) to logits (rows, V). With
// row_split (every rank of it running the same tokens; weights built with the same part) the
// MLP and the head are split over its ranks.
void llama_inference_forward(const LlamaConfig& config, const InferenceWeights& weights,
                             const TokenBatch& batch, InferenceAttention& attention,
                             InferenceWorkspace& ws, std::span<const int64_t> logit_rows,
                             float* logits, RowSplit* row_split = nullptr);

}  // namespace maxctx::model

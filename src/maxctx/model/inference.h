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

// The weights inference reads. Views the training layout (LlamaWeights, which must outlive this);
// with quantize_int8 every projection and the output head get an int8 copy, which is then what
// the forward reads (the embedding lookup and the norms stay fp32).
class InferenceWeights {
 public:
  InferenceWeights(const LlamaConfig& config, const LlamaWeights& weights, bool quantize_int8);
  InferenceWeights(const InferenceWeights&) = delete;
  InferenceWeights& operator=(const InferenceWeights&) = delete;

  bool int8() const { return !quantized_.empty(); }
  // Bytes one decode step streams: every projection and the head as stored (int8 codes plus
  // scales, or fp32), the norms, and one embedding row per token is not counted.
  int64_t bytes_per_step() const;

  const float* embed;       // (V, E)
  const float* final_norm;  // (E)
  InferenceLinear lm_head;  // (V, E)
  std::vector<InferenceLayer> layers;

 private:
  std::vector<kernels::cpu::Int8Weights> quantized_;
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
};

InferenceWorkspace allocate_inference_workspace(const LlamaConfig& config, int64_t max_rows);

// Runs the decoder over this rank's tokens (batch.targets is ignored) and writes the logits of
// rows logit_rows (indices into the B·S rows, in the order given) to logits (rows, V).
void llama_inference_forward(const LlamaConfig& config, const InferenceWeights& weights,
                             const TokenBatch& batch, InferenceAttention& attention,
                             InferenceWorkspace& ws, std::span<const int64_t> logit_rows,
                             float* logits);

}  // namespace maxctx::model

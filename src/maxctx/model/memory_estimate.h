// Lower bounds of the bytes one rank holds at once, for the check before allocating
// (core/memory_check.h). Only buffers that certainly coexist are counted, so the bound never
// exceeds what the run allocates and a run that fits is never refused; the sums are doubles,
// since the dimensions multiplied here may be far beyond int64.
#pragma once

#include <cstdint>
#include <string>

#include "maxctx/model/llama_config.h"

namespace maxctx::model {

struct MemoryEstimate {
  double bytes = 0;    // per rank
  std::string detail;  // "weights 1.2 GiB + activations 3.4 GiB", for the message
};

// Every weight, in weight_dtype (element count in double precision).
double parameter_bytes(const LlamaConfig& model);

// Training: this rank's master shard of the weights (`weight_shard_bytes`: its local weights
// over the fsdp × context ranks that split them; the full buffers are reserved, their units
// committed one at a time), plus the residual stream (L+1 rows of N x E, kept under any
// recomputation) and the f32 logits of this rank's N = rows x seq tokens (vocabulary split over
// tensor ranks), of one loss tile's rows under num_vocab_tiling.
MemoryEstimate training_memory(const LlamaConfig& model, int64_t rows, int64_t seq,
                               int64_t tensor_size, double weight_shard_bytes);

// The weights one inference rank holds when a mixture of experts' experts are split over
// `expert_ranks` ranks (1: every expert): the whole model less the other ranks' experts,
// computed in double so a huge config is a clear error, not an overflow. In weight_dtype, or
// with int8 (quantization=int8, which keeps no float copy of a projection) the projections as
// int8 codes plus two f32 per row and the rest (embedding, norms, router) in weight_dtype.
// The embedding and head split over `ca` context_autoregressive ranks (the vocabulary; rank 0's
// share, the largest). Equal to infer::inference_weight_specs' list (the loader's), which the
// tests check.
double inference_weight_bytes(const LlamaConfig& model, int64_t expert_ranks, bool int8 = false,
                              int64_t ca = 1);

// Inference: this rank's weights (inference_weight_bytes) plus its share of the KV cache:
// 2 x layers x slots x max_target_length x kv_dim elements over `ca` ranks, one byte each when
// int8-quantized, else two (bf16 dtype) or four. `slots`: those of this rank's expert group.
// Plus `workspace_bytes`, the forward's buffers as the caller counts them (the engine: its
// workspace rows and the prefill attention's staging, which a chunked prefill bounds).
MemoryEstimate inference_memory(const LlamaConfig& model, int64_t slots, int64_t max_target_length,
                                int64_t ca, bool quantize_kvcache, int64_t expert_ranks,
                                bool int8_weights = false, double workspace_bytes = 0);

}  // namespace maxctx::model

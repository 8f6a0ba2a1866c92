// The Llama weight tensors, declared once (STYLE.md item 5).
//
// llama_weight_specs() is the single list of every parameter tensor: its Hugging Face name, its
// shape on this rank, how tensor parallelism splits it and how it is initialised. That list
// drives allocation (one flat buffer, layer by layer, so fsdp can shard whole layers), the
// counter-based initialisation, gradient and optimizer-state buffers (flat buffers of the same
// layout, bound the same way), checkpoint load/save and gradient sync. Nothing else enumerates
// the weights.
//
// Layout of the flat buffer: embed_tokens, then for each layer input_layernorm, q, k, v, o,
// post_attention_layernorm, gate, up, down, then the final norm and lm_head (absent when tied).
// Matrices are (out_dim, in_dim) as nn.Linear and Hugging Face store them.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "maxctx/model/llama_config.h"

namespace maxctx::model {

// How tensor parallelism (Megatron) splits a weight over the `tensor` axis.
enum class TensorSplit {
  kReplicated,  // every rank holds all of it (norms, embedding, lm_head)
  kRows,        // output dim split: column-parallel q, k, v, gate, up
  kCols,        // input dim split: row-parallel o, down (outputs all-reduced)
};

enum class WeightInit {
  kOnes,        // RMSNorm scales
  kFanInNormal  // N(0, 1/in_dim): MaxText's variance scaling for dense kernels and embeddings
};

struct WeightSpec {
  std::string name;     // Hugging Face name, e.g. "model.layers.0.self_attn.q_proj.weight"
  int layer;            // decoder layer, or -1 for embedding, final norm and head
  int64_t rows;         // local (this tensor-parallel rank's) shape; rows = out_dim
  int64_t cols;         // 1 for vectors
  int64_t global_rows;  // the unsharded shape
  int64_t global_cols;
  int64_t row_offset;  // where this rank's block starts in the unsharded tensor
  int64_t col_offset;
  TensorSplit split;
  WeightInit init;
  int64_t offset;  // first element in the flat buffer

  int64_t numel() const { return rows * cols; }
};

// Every weight tensor of `config` on tensor-parallel rank `tp_rank` of `tp_size` (heads and the
// MLP width must divide by tp_size; checked with an error naming them).
std::vector<WeightSpec> llama_weight_specs(const LlamaConfig& config, int tp_size = 1,
                                           int tp_rank = 0);
int64_t total_numel(const std::vector<WeightSpec>& specs);
// Elements [begin, end) of the flat buffer that hold decoder layer `layer` (-1: the rest is not
// contiguous, so only layers are asked for).
struct FlatRange {
  int64_t begin;
  int64_t end;
};
FlatRange layer_range(const std::vector<WeightSpec>& specs, int layer);
// The weight units in the model's order of use, each contiguous in the flat buffer:
// [embedding, layer 0, ..., layer L-1, final norm + lm_head]. fsdp shards unit by unit.
std::vector<FlatRange> weight_units(const std::vector<WeightSpec>& specs);

// Pointers into one flat buffer laid out by the specs: the parameters, their gradients, or an
// optimizer moment all bind the same way.
struct LayerWeights {
  float* attn_norm;  // (E)
  float* wq;         // (Hq·D, E)
  float* wk;         // (Hkv·D, E)
  float* wv;         // (Hkv·D, E)
  float* wo;         // (E, Hq·D)
  float* mlp_norm;   // (E)
  float* w_gate;     // (F, E)
  float* w_up;       // (F, E)
  float* w_down;     // (E, F)
};

struct LlamaWeights {
  float* embed;  // (V, E)
  std::vector<LayerWeights> layers;
  float* final_norm;  // (E)
  float* lm_head;     // (V, E); == embed when the embeddings are tied
};

LlamaWeights bind_weights(const std::vector<WeightSpec>& specs, float* flat);

// Counter-based initialisation: element (r, c) of a tensor is the value of global element
// (global_r, global_c) of that tensor under (seed, stream_id(name)), so every sharding of the
// weights initialises exactly the bytes of the single-device run.
void init_weights(const std::vector<WeightSpec>& specs, float* flat, uint64_t seed);

}  // namespace maxctx::model

// The dimensions and numerics of one Llama-family decoder, independent of how it is sharded.
//
// Built from the resolved Config (model presets, global_parameter_scale already applied) or
// from a Hugging Face config.json. The model code reads only this struct, never Config.
#pragma once

#include <cstdint>

#include "maxctx/config/config.h"
#include "maxctx/core/dtype.h"
#include "maxctx/kernels/types.h"

namespace maxctx::model {

struct LlamaConfig {
  int64_t vocab_size = 0;
  int64_t emb_dim = 0;          // E
  int64_t num_query_heads = 0;  // Hq
  int64_t num_kv_heads = 0;     // Hkv
  int64_t head_dim = 0;         // D
  int64_t mlp_dim = 0;          // F
  int64_t num_layers = 0;       // L
  float norm_eps = 1e-5f;
  kernels::RopeParams rope;
  bool tie_embeddings = false;  // output head = embedding table (logits_via_embedding)
  int32_t sliding_window = 0;   // 0: full causal attention
  // Precision (MaxText's `dtype` and `weight_dtype`): activations and matmul inputs, and the
  // weights as stored (master weights and optimizer state in training).
  DType dtype = DType::kF32;
  DType weight_dtype = DType::kF32;
  // Mixture of experts (decoder_block mixtral): each layer's MLP is num_experts SwiGLU experts of
  // width mlp_dim, num_experts_per_tok of them per token (model/moe_block.h).
  bool moe = false;
  int64_t num_experts = 1;          // X
  int64_t num_experts_per_tok = 1;  // K
  bool sparse_matmul = true;        // false: dense dispatch with capacity_factor
  double capacity_factor = -1.0;    // <= 0: no dropping
  double load_balance_loss_weight = 0.0;
  // Training's num_vocab_tiling: the output head, loss and their backward run over this many
  // tiles of the rank's tokens, one tile's logits held at a time (model/llama.h). Inference and
  // check-logits keep 1 (MaxText tiles in train mode only).
  int64_t vocab_tiles = 1;

  int64_t q_dim() const { return num_query_heads * head_dim; }
  int64_t kv_dim() const { return num_kv_heads * head_dim; }
  int64_t num_parameters() const;
};

// The parameter count of `config` (every expert and the router included) in T: int64_t (what
// num_parameters gives), or double where the dimensions are not yet known to fit int64 (the
// memory check before allocating).
template <typename T>
T parameter_count(const LlamaConfig& config);

// Throws maxctx::Error for what the CPU model does not implement (rope_min_timescale != 1),
// naming the key.
LlamaConfig llama_config_from(const Config& config);

// `dtype` and `weight_dtype` of the config into model (for a model whose dimensions come from
// elsewhere: a Hugging Face config.json), and for a mixture of experts the dispatch keys
// (sparse_matmul, capacity_factor, load_balance_loss_weight), which a checkpoint does not carry.
void apply_precision(const Config& config, LlamaConfig& model);

}  // namespace maxctx::model

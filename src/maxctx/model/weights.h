// The Llama weight tensors, declared once (STYLE.md item 5).
//
// llama_weight_decls() is the single list of every parameter tensor: its Hugging Face name, its
// unsharded shape, its role and how it is initialised; parallel/weight_sharding.h decides from
// the role how tensor parallelism splits it (llama_weight_specs: this rank's blocks). That list
// drives allocation (one flat buffer, layer by layer, so fsdp can shard whole layers), the
// counter-based initialisation, gradient and optimizer-state buffers (flat buffers of the same
// layout, bound the same way), checkpoint load/save and gradient sync. Nothing else enumerates
// the weights.
//
// Layout of the flat buffer: embed_tokens, then for each layer input_layernorm, q, k, v, o,
// post_attention_layernorm, gate, up, down, then the final norm and lm_head (absent when tied).
// A mixture of experts (Mixtral) has, instead of gate, up and down, the router
// (block_sparse_moe.gate) and per expert j block_sparse_moe.experts.j.{w1, w3, w2} (gate, up,
// down).
// Matrices are (out_dim, in_dim) as nn.Linear and Hugging Face store them.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "maxctx/core/tensor.h"
#include "maxctx/kernels/kernels.h"
#include "maxctx/model/llama_config.h"
#include "maxctx/model/moe_block.h"
#include "maxctx/parallel/weight_sharding.h"

namespace maxctx::model {

// The weight list's types are parallel/'s (it decides the split); the model names them here.
using parallel::FlatRange;
using parallel::layer_range;
using parallel::TensorSplit;
using parallel::total_numel;
using parallel::weight_units;
using parallel::WeightDecl;
using parallel::WeightInit;
using parallel::WeightRole;
using parallel::WeightSpec;

// Every weight tensor of `config`, unsharded, in the flat buffer's order: the model's one list.
std::vector<WeightDecl> llama_weight_decls(const LlamaConfig& config);

// Every weight tensor of `config` on tensor-parallel rank `tp_rank` of `tp_size` (heads and the
// MLP width must divide by tp_size; checked with an error naming them) and expert rank
// `ep_rank` of `ep_size` (num_experts must divide by ep_size; the other ranks' experts have
// empty specs, parallel/weight_sharding.h).
std::vector<WeightSpec> llama_weight_specs(const LlamaConfig& config, int tp_size = 1,
                                           int tp_rank = 0, int ep_size = 1, int ep_rank = 0);
// Views into one flat buffer laid out by the specs: the parameters, their gradients, or an
// optimizer moment all bind the same way. Vectors are 1-D, matrices (out_dim, in_dim).
struct LayerWeights {
  TensorView attn_norm;  // (E)
  TensorView wq;         // (Hq·D, E)
  TensorView wk;         // (Hkv·D, E)
  TensorView wv;         // (Hkv·D, E)
  TensorView wo;         // (E, Hq·D)
  TensorView mlp_norm;   // (E)
  TensorView w_gate;     // (F, E); empty in a mixture of experts
  TensorView w_up;       // (F, E)
  TensorView w_down;     // (E, F)
  MoeLayerWeights moe;   // the router and experts (mixture of experts only)
};

struct LlamaWeights {
  TensorView embed;  // (V, E)
  std::vector<LayerWeights> layers;
  TensorView final_norm;  // (E)
  TensorView lm_head;     // (V, E); == embed when the embeddings are tied
};

// Views of flat's dtype (f32, or bf16 weights); the float* form views an f32 buffer.
LlamaWeights bind_weights(const std::vector<WeightSpec>& specs, TensorView flat);
LlamaWeights bind_weights(const std::vector<WeightSpec>& specs, float* flat);
// The weights split over two buffers, each with its own specs (offsets into it) and dtype:
// inference's float tensors and its int8 projections' codes (model/quantized_checkpoint.h).
LlamaWeights bind_weights(const std::vector<WeightSpec>& specs, TensorView flat,
                          const std::vector<WeightSpec>& more_specs, TensorView more);

// Counter-based initialisation: element (r, c) of a tensor is the value of global element
// (global_r, global_c) of that tensor under (seed, stream_id(name)), so every sharding of the
// weights initialises exactly the bytes of the single-device run.
void init_weights(const std::vector<WeightSpec>& specs, float* flat, uint64_t seed);
// Elements [begin, begin + out.size()) of the flat buffer init_weights(specs, ...) fills, alone:
// the same values (the generator is counter-based, one counter per element of the unsharded
// tensor), so that a rank can initialise its fsdp shard without building the model.
void init_weight_range(const std::vector<WeightSpec>& specs, int64_t begin, std::span<float> out,
                       uint64_t seed);
// The same values rounded once to flat's dtype, one tensor at a time (no f32 copy of the whole
// model), written through `kernels`.
void init_weights(const kernels::Kernels& kernels, const std::vector<WeightSpec>& specs,
                  TensorView flat, uint64_t seed);

}  // namespace maxctx::model

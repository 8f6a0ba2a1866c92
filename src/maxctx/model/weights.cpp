#include "maxctx/model/weights.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>

#include "maxctx/core/check.h"
#include "maxctx/core/rng.h"
#include "maxctx/kernels/host_transfer.h"

namespace maxctx::model {
namespace {

std::string layer_name(int layer, const char* suffix) {
  return fmt::format("model.layers.{}.{}", layer, suffix);
}

// Hugging Face Mixtral's name of expert j's projection w1 (gate), w3 (up) or w2 (down).
std::string expert_name(int layer, int64_t expert, const char* projection) {
  return fmt::format("model.layers.{}.block_sparse_moe.experts.{}.{}.weight", layer, expert,
                     projection);
}

}  // namespace

std::vector<WeightDecl> llama_weight_decls(const LlamaConfig& c) {
  std::vector<WeightDecl> decls;
  const auto add = [&](std::string name, int layer, int64_t rows, int64_t cols, WeightRole role,
                       WeightInit init, int64_t expert = -1) {
    decls.push_back({std::move(name), layer, rows, cols, role, init, expert});
  };
  const int64_t E = c.emb_dim;
  add("model.embed_tokens.weight", -1, c.vocab_size, E, WeightRole::kEmbedding,
      WeightInit::kFanInNormal);
  for (int l = 0; l < c.num_layers; ++l) {
    add(layer_name(l, "input_layernorm.weight"), l, E, 1, WeightRole::kNorm, WeightInit::kOnes);
    add(layer_name(l, "self_attn.q_proj.weight"), l, c.q_dim(), E, WeightRole::kHeadsOrHidden,
        WeightInit::kFanInNormal);
    add(layer_name(l, "self_attn.k_proj.weight"), l, c.kv_dim(), E, WeightRole::kHeadsOrHidden,
        WeightInit::kFanInNormal);
    add(layer_name(l, "self_attn.v_proj.weight"), l, c.kv_dim(), E, WeightRole::kHeadsOrHidden,
        WeightInit::kFanInNormal);
    add(layer_name(l, "self_attn.o_proj.weight"), l, E, c.q_dim(), WeightRole::kIntoResidual,
        WeightInit::kFanInNormal);
    add(layer_name(l, "post_attention_layernorm.weight"), l, E, 1, WeightRole::kNorm,
        WeightInit::kOnes);
    if (c.moe) {
      add(layer_name(l, "block_sparse_moe.gate.weight"), l, c.num_experts, E, WeightRole::kRouter,
          WeightInit::kFanInNormal);
      for (int64_t j = 0; j < c.num_experts; ++j) {
        add(expert_name(l, j, "w1"), l, c.mlp_dim, E, WeightRole::kHeadsOrHidden,
            WeightInit::kFanInNormal, j);
        add(expert_name(l, j, "w3"), l, c.mlp_dim, E, WeightRole::kHeadsOrHidden,
            WeightInit::kFanInNormal, j);
        add(expert_name(l, j, "w2"), l, E, c.mlp_dim, WeightRole::kIntoResidual,
            WeightInit::kFanInNormal, j);
      }
      continue;
    }
    add(layer_name(l, "mlp.gate_proj.weight"), l, c.mlp_dim, E, WeightRole::kHeadsOrHidden,
        WeightInit::kFanInNormal);
    add(layer_name(l, "mlp.up_proj.weight"), l, c.mlp_dim, E, WeightRole::kHeadsOrHidden,
        WeightInit::kFanInNormal);
    add(layer_name(l, "mlp.down_proj.weight"), l, E, c.mlp_dim, WeightRole::kIntoResidual,
        WeightInit::kFanInNormal);
  }
  add("model.norm.weight", -1, E, 1, WeightRole::kNorm, WeightInit::kOnes);
  if (!c.tie_embeddings) {
    add("lm_head.weight", -1, c.vocab_size, E, WeightRole::kOutputHead, WeightInit::kFanInNormal);
  }
  return decls;
}

std::vector<WeightSpec> llama_weight_specs(const LlamaConfig& c, int tp_size, int tp_rank,
                                           int ep_size, int ep_rank) {
  // Heads are split whole: checked here, where the numbers mean heads, with a user's error.
  if (c.num_query_heads % tp_size != 0 || c.num_kv_heads % tp_size != 0 ||
      c.mlp_dim % tp_size != 0) {
    fail("tensor parallelism {} must divide num_query_heads {}, num_kv_heads {} and mlp_dim {}",
         tp_size, c.num_query_heads, c.num_kv_heads, c.mlp_dim);
  }
  // A dense model under the expert axis has no experts to split: the axis shards its batch only
  // (MaxText's rules), as `data` would.
  if (c.moe && c.num_experts % ep_size != 0) {
    fail(
        "expert parallelism {} (ici_expert_parallelism x dcn_expert_parallelism) must divide "
        "num_experts {}",
        ep_size, c.num_experts);
  }
  return parallel::shard_weights(llama_weight_decls(c), tp_size, tp_rank, ep_size, ep_rank);
}

LlamaWeights bind_weights(const std::vector<WeightSpec>& specs, float* flat) {
  return bind_weights(specs, TensorView::of(flat, total_numel(specs)));
}

LlamaWeights bind_weights(const std::vector<WeightSpec>& specs, TensorView flat) {
  return bind_weights(specs, flat, {}, TensorView());
}

LlamaWeights bind_weights(const std::vector<WeightSpec>& specs, TensorView flat,
                          const std::vector<WeightSpec>& more_specs, TensorView more) {
  MAXCTX_CHECK_EQ(flat.numel(), total_numel(specs), "a flat weight buffer for these specs");
  if (!more_specs.empty()) {
    MAXCTX_CHECK_EQ(more.numel(), total_numel(more_specs), "a second buffer for its specs");
  }
  std::map<std::string, TensorView> by_name;
  int num_layers = 0;
  const auto bind = [&](const std::vector<WeightSpec>& list, TensorView buffer) {
    for (const WeightSpec& s : list) {
      const Shape shape = s.role == WeightRole::kNorm ? Shape{s.rows} : Shape{s.rows, s.cols};
      by_name[s.name] = buffer.elements(s.offset, s.numel()).reshaped(shape);
      num_layers = std::max(num_layers, s.layer + 1);
    }
  };
  bind(specs, flat);
  bind(more_specs, more);
  const auto at = [&](const std::string& name) {
    const auto it = by_name.find(name);
    MAXCTX_CHECK(it != by_name.end(), "weight {} is not declared", name);
    return it->second;
  };
  LlamaWeights w;
  w.embed = at("model.embed_tokens.weight");
  for (int l = 0; l < num_layers; ++l) {
    LayerWeights& layer = w.layers.emplace_back();
    layer.attn_norm = at(layer_name(l, "input_layernorm.weight"));
    layer.wq = at(layer_name(l, "self_attn.q_proj.weight"));
    layer.wk = at(layer_name(l, "self_attn.k_proj.weight"));
    layer.wv = at(layer_name(l, "self_attn.v_proj.weight"));
    layer.wo = at(layer_name(l, "self_attn.o_proj.weight"));
    layer.mlp_norm = at(layer_name(l, "post_attention_layernorm.weight"));
    if (by_name.count(layer_name(l, "block_sparse_moe.gate.weight"))) {
      layer.moe.router = at(layer_name(l, "block_sparse_moe.gate.weight"));
      for (int64_t j = 0; j < layer.moe.router.shape()[0]; ++j) {
        layer.moe.experts.push_back({at(expert_name(l, j, "w1")), at(expert_name(l, j, "w3")),
                                     at(expert_name(l, j, "w2"))});
      }
      continue;
    }
    layer.w_gate = at(layer_name(l, "mlp.gate_proj.weight"));
    layer.w_up = at(layer_name(l, "mlp.up_proj.weight"));
    layer.w_down = at(layer_name(l, "mlp.down_proj.weight"));
  }
  w.final_norm = at("model.norm.weight");
  w.lm_head = by_name.count("lm_head.weight") ? at("lm_head.weight") : w.embed;
  return w;
}

void init_weights(const std::vector<WeightSpec>& specs, float* flat, uint64_t seed) {
  init_weight_range(specs, 0, {flat, static_cast<size_t>(total_numel(specs))}, seed);
}

void init_weight_range(const std::vector<WeightSpec>& specs, int64_t begin, std::span<float> out,
                       uint64_t seed) {
  const int64_t end = begin + static_cast<int64_t>(out.size());
  for (const WeightSpec& s : specs) {
    const int64_t lo = std::max(begin, s.offset), hi = std::min(end, s.offset + s.numel());
    if (lo >= hi) continue;
    float* at = out.data() + (lo - begin);
    if (s.init == WeightInit::kOnes) {
      std::fill(at, at + (hi - lo), 1.0f);
      continue;
    }
    const uint64_t stream = rng::stream_id(s.name);
    const float stddev = 1.0f / std::sqrt(static_cast<float>(s.global_cols));
    // This rank's block starts at global (row0, col0); each local row is a contiguous run of
    // global elements, so one fill per row (or the part of it in the range) reproduces the
    // unsharded tensor exactly.
    for (int64_t e = lo - s.offset; e < hi - s.offset;) {
      const int64_t r = e / s.cols, c = e % s.cols;
      const int64_t n = std::min(s.cols - c, hi - s.offset - e);
      const auto first =
          static_cast<uint64_t>((s.row_offset + r) * s.global_cols + s.col_offset + c);
      rng::fill_normal({out.data() + (s.offset + e - begin), static_cast<size_t>(n)}, seed, stream,
                       first, 0.0f, stddev);
      e += n;
    }
  }
}

void init_weights(const kernels::Kernels& kernels, const std::vector<WeightSpec>& specs,
                  TensorView flat, uint64_t seed) {
  MAXCTX_CHECK_EQ(flat.numel(), total_numel(specs), "a flat weight buffer for these specs");
  std::vector<float> values;
  for (const WeightSpec& s : specs) {
    values.resize(static_cast<size_t>(s.numel()));
    WeightSpec one = s;
    one.offset = 0;
    init_weights({one}, values.data(), seed);
    kernels::upload_floats(kernels, flat.elements(s.offset, s.numel()), values);
  }
}

}  // namespace maxctx::model

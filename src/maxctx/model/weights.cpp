#include "maxctx/model/weights.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>

#include "maxctx/core/check.h"
#include "maxctx/core/rng.h"

namespace maxctx::model {
namespace {

std::string layer_name(int layer, const char* suffix) {
  return fmt::format("model.layers.{}.{}", layer, suffix);
}

}  // namespace

std::vector<WeightSpec> llama_weight_specs(const LlamaConfig& c, int tp_size, int tp_rank) {
  MAXCTX_CHECK(tp_size >= 1 && tp_rank >= 0 && tp_rank < tp_size, "tensor rank {} of {}", tp_rank,
               tp_size);
  if (c.num_query_heads % tp_size != 0 || c.num_kv_heads % tp_size != 0 ||
      c.mlp_dim % tp_size != 0) {
    fail("tensor parallelism {} must divide num_query_heads {}, num_kv_heads {} and mlp_dim {}",
         tp_size, c.num_query_heads, c.num_kv_heads, c.mlp_dim);
  }
  std::vector<WeightSpec> specs;
  int64_t offset = 0;
  const auto add = [&](std::string name, int layer, int64_t rows, int64_t cols, TensorSplit split,
                       WeightInit init) {
    const int64_t local_rows = split == TensorSplit::kRows ? rows / tp_size : rows;
    const int64_t local_cols = split == TensorSplit::kCols ? cols / tp_size : cols;
    const int64_t row_offset = split == TensorSplit::kRows ? tp_rank * local_rows : 0;
    const int64_t col_offset = split == TensorSplit::kCols ? tp_rank * local_cols : 0;
    specs.push_back({std::move(name), layer, local_rows, local_cols, rows, cols, row_offset,
                     col_offset, split, init, offset});
    offset += local_rows * local_cols;
  };
  const int64_t E = c.emb_dim;
  add("model.embed_tokens.weight", -1, c.vocab_size, E, TensorSplit::kReplicated,
      WeightInit::kFanInNormal);
  for (int l = 0; l < c.num_layers; ++l) {
    add(layer_name(l, "input_layernorm.weight"), l, E, 1, TensorSplit::kReplicated,
        WeightInit::kOnes);
    add(layer_name(l, "self_attn.q_proj.weight"), l, c.q_dim(), E, TensorSplit::kRows,
        WeightInit::kFanInNormal);
    add(layer_name(l, "self_attn.k_proj.weight"), l, c.kv_dim(), E, TensorSplit::kRows,
        WeightInit::kFanInNormal);
    add(layer_name(l, "self_attn.v_proj.weight"), l, c.kv_dim(), E, TensorSplit::kRows,
        WeightInit::kFanInNormal);
    add(layer_name(l, "self_attn.o_proj.weight"), l, E, c.q_dim(), TensorSplit::kCols,
        WeightInit::kFanInNormal);
    add(layer_name(l, "post_attention_layernorm.weight"), l, E, 1, TensorSplit::kReplicated,
        WeightInit::kOnes);
    add(layer_name(l, "mlp.gate_proj.weight"), l, c.mlp_dim, E, TensorSplit::kRows,
        WeightInit::kFanInNormal);
    add(layer_name(l, "mlp.up_proj.weight"), l, c.mlp_dim, E, TensorSplit::kRows,
        WeightInit::kFanInNormal);
    add(layer_name(l, "mlp.down_proj.weight"), l, E, c.mlp_dim, TensorSplit::kCols,
        WeightInit::kFanInNormal);
  }
  add("model.norm.weight", -1, E, 1, TensorSplit::kReplicated, WeightInit::kOnes);
  if (!c.tie_embeddings) {
    add("lm_head.weight", -1, c.vocab_size, E, TensorSplit::kReplicated, WeightInit::kFanInNormal);
  }
  return specs;
}

int64_t total_numel(const std::vector<WeightSpec>& specs) {
  return specs.empty() ? 0 : specs.back().offset + specs.back().numel();
}

FlatRange layer_range(const std::vector<WeightSpec>& specs, int layer) {
  FlatRange range{-1, -1};
  for (const WeightSpec& s : specs) {
    if (s.layer != layer) continue;
    if (range.begin < 0) range.begin = s.offset;
    MAXCTX_CHECK(range.end < 0 || range.end == s.offset, "layer {} is not contiguous", layer);
    range.end = s.offset + s.numel();
  }
  MAXCTX_CHECK(range.begin >= 0, "no weights for layer {}", layer);
  return range;
}

std::vector<FlatRange> weight_units(const std::vector<WeightSpec>& specs) {
  MAXCTX_CHECK(!specs.empty() && specs.front().layer == -1, "the embedding comes first");
  int num_layers = 0;
  for (const WeightSpec& s : specs) num_layers = std::max(num_layers, s.layer + 1);
  std::vector<FlatRange> units;
  units.push_back({0, specs.front().numel()});
  for (int l = 0; l < num_layers; ++l) units.push_back(layer_range(specs, l));
  const int64_t head_begin = num_layers > 0 ? units.back().end : units.front().end;
  units.push_back({head_begin, total_numel(specs)});
  return units;
}

LlamaWeights bind_weights(const std::vector<WeightSpec>& specs, float* flat) {
  std::map<std::string, float*> by_name;
  int num_layers = 0;
  for (const WeightSpec& s : specs) {
    by_name[s.name] = flat + s.offset;
    num_layers = std::max(num_layers, s.layer + 1);
  }
  const auto at = [&](const std::string& name) {
    const auto it = by_name.find(name);
    MAXCTX_CHECK(it != by_name.end(), "weight {} is not declared", name);
    return it->second;
  };
  LlamaWeights w;
  w.embed = at("model.embed_tokens.weight");
  for (int l = 0; l < num_layers; ++l) {
    w.layers.push_back(
        {at(layer_name(l, "input_layernorm.weight")), at(layer_name(l, "self_attn.q_proj.weight")),
         at(layer_name(l, "self_attn.k_proj.weight")), at(layer_name(l, "self_attn.v_proj.weight")),
         at(layer_name(l, "self_attn.o_proj.weight")),
         at(layer_name(l, "post_attention_layernorm.weight")),
         at(layer_name(l, "mlp.gate_proj.weight")), at(layer_name(l, "mlp.up_proj.weight")),
         at(layer_name(l, "mlp.down_proj.weight"))});
  }
  w.final_norm = at("model.norm.weight");
  w.lm_head = by_name.count("lm_head.weight") ? at("lm_head.weight") : w.embed;
  return w;
}

void init_weights(const std::vector<WeightSpec>& specs, float* flat, uint64_t seed) {
  for (const WeightSpec& s : specs) {
    float* out = flat + s.offset;
    if (s.init == WeightInit::kOnes) {
      std::fill(out, out + s.numel(), 1.0f);
      continue;
    }
    const uint64_t stream = rng::stream_id(s.name);
    const float stddev = 1.0f / std::sqrt(static_cast<float>(s.global_cols));
    // This rank's block starts at global (row0, col0); each local row is a contiguous run of
    // global elements, so one fill per row reproduces the unsharded tensor exactly.
    for (int64_t r = 0; r < s.rows; ++r) {
      const int64_t global_row = s.row_offset + r;
      const uint64_t first = static_cast<uint64_t>(global_row * s.global_cols + s.col_offset);
      rng::fill_normal({out + r * s.cols, static_cast<size_t>(s.cols)}, seed, stream, first, 0.0f,
                       stddev);
    }
  }
}

}  // namespace maxctx::model

#include "maxctx/model/memory_estimate.h"

#include <fmt/format.h>

#include <algorithm>

#include "maxctx/core/memory_check.h"
#include "maxctx/core/split.h"
#include "maxctx/model/activations.h"

namespace maxctx::model {

double parameter_bytes(const LlamaConfig& m) {
  return parameter_count<double>(m) * static_cast<double>(dtype_size(m.weight_dtype));
}

MemoryEstimate training_memory(const LlamaConfig& m, int64_t rows, int64_t seq, int64_t tensor_size,
                               double weight_shard_bytes) {
  const double weights = weight_shard_bytes;
  const double tokens = static_cast<double>(rows) * static_cast<double>(seq);
  const double residual = (static_cast<double>(m.num_layers) + 1) * tokens *
                          static_cast<double>(m.emb_dim) * static_cast<double>(dtype_size(m.dtype));
  // One loss tile's rows at a time (num_vocab_tiling; all of them untiled): the engine's count.
  const double logits = static_cast<double>(logit_rows(rows * seq, m.vocab_tiles)) *
                        static_cast<double>(m.vocab_size) * 4.0 /
                        static_cast<double>(std::max<int64_t>(tensor_size, 1));
  MemoryEstimate e;
  e.bytes = weights + residual + logits;
  e.detail = fmt::format("weight shard {} + residual stream {} + logits {}{}",
                         format_bytes(weights), format_bytes(residual), format_bytes(logits),
                         m.vocab_tiles > 1
                             ? fmt::format(" (one of num_vocab_tiling = {} tiles)", m.vocab_tiles)
                             : std::string());
  return e;
}

double inference_weight_bytes(const LlamaConfig& m, int64_t expert_ranks, bool int8, int64_t ca) {
  const auto d = [](int64_t v) { return static_cast<double>(v); };
  const double E = d(m.emb_dim), D = d(m.head_dim), F = d(m.mlp_dim);
  const double heads = d(m.num_query_heads) * D, kv = d(m.num_kv_heads) * D;
  const double held_experts = m.moe ? d(m.num_experts) / d(std::max<int64_t>(expert_ranks, 1)) : 1;
  // The attention projections' rows over ca (rank 0's share of each, the largest).
  const auto share = [&](int64_t rows) { return d(ceil_div(rows, std::max<int64_t>(ca, 1))); };
  const double q_rows = share(m.num_query_heads * m.head_dim);
  const double kv_rows = share(m.num_kv_heads * m.head_dim), o_rows = share(m.emb_dim);
  // The MLP: a mixture's held experts whole, or a dense MLP's rows over ca (gate and up F, down E).
  const double hidden_rows = m.moe ? F * held_experts : share(m.mlp_dim);
  const double down_rows = m.moe ? E * held_experts : share(m.emb_dim);
  // The projections (what quantization=int8 quantizes) as (elements, rows), per layer and head.
  const double layer_elements =
      q_rows * E + 2.0 * kv_rows * E + o_rows * heads + 2.0 * hidden_rows * E + down_rows * F;
  const double layer_rows = q_rows + 2.0 * kv_rows + o_rows + 2.0 * hidden_rows + down_rows;
  const double mlp_not_held = m.moe ? 0.0 : 2.0 * (F - hidden_rows) * E + (E - down_rows) * F;
  const double split_not_held = d(m.num_layers) * ((heads - q_rows) * E + 2.0 * (kv - kv_rows) * E +
                                                   (E - o_rows) * heads + mlp_not_held);
  // The vocabulary over ca: rank 0's rows of the embedding and head, the most any rank holds.
  const double vocab = d(ceil_div(m.vocab_size, std::max<int64_t>(ca, 1)));
  const double vocab_not_held = d(m.vocab_size) - vocab;
  const double head_elements = m.tie_embeddings ? 0.0 : vocab * E;
  const double head_rows = m.tie_embeddings ? 0.0 : vocab;
  const double projections = d(m.num_layers) * layer_elements + head_elements;
  const double rows = d(m.num_layers) * layer_rows + head_rows;
  const double experts_not_held =
      m.moe ? d(m.num_layers) * 3.0 * E * F * (d(m.num_experts) - held_experts) : 0.0;
  const double element = static_cast<double>(dtype_size(m.weight_dtype));
  const double floats = parameter_count<double>(m) - experts_not_held - split_not_held -
                        projections - vocab_not_held * E * (m.tie_embeddings ? 1.0 : 2.0);
  // int8: codes plus a f32 scale and row sum per row (model::int8_weight_bytes); the rest float.
  return floats * element + (int8 ? projections + 8.0 * rows : projections * element);
}

MemoryEstimate inference_memory(const LlamaConfig& m, int64_t slots, int64_t max_target_length,
                                int64_t ca, bool quantize_kvcache, int64_t expert_ranks,
                                bool int8_weights, double workspace_bytes) {
  const double weights = inference_weight_bytes(m, expert_ranks, int8_weights, ca);
  const double element = quantize_kvcache ? 1.0 : static_cast<double>(dtype_size(m.dtype));
  const double cache = 2.0 * static_cast<double>(m.num_layers) * static_cast<double>(slots) *
                       static_cast<double>(max_target_length) *
                       static_cast<double>(m.num_kv_heads) * static_cast<double>(m.head_dim) *
                       element / static_cast<double>(std::max<int64_t>(ca, 1));
  MemoryEstimate e;
  e.bytes = weights + cache + workspace_bytes;
  e.detail = fmt::format("weights held {} + KV cache share {}", format_bytes(weights),
                         format_bytes(cache));
  if (workspace_bytes > 0)
    e.detail += fmt::format(" + workspace {}", format_bytes(workspace_bytes));
  return e;
}

}  // namespace maxctx::model

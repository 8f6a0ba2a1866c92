#include "maxctx/model/memory_estimate.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "maxctx/core/memory_check.h"

namespace maxctx::model {

double parameter_bytes(const LlamaConfig& m) {
  return parameter_count<double>(m) * static_cast<double>(dtype_size(m.weight_dtype));
}

MemoryEstimate training_memory(const LlamaConfig& m, int64_t rows, int64_t seq,
                               int64_t tensor_size) {
  const double weights = parameter_bytes(m);
  const double tokens = static_cast<double>(rows) * static_cast<double>(seq);
  const double residual = (static_cast<double>(m.num_layers) + 1) * tokens *
                          static_cast<double>(m.emb_dim) * static_cast<double>(dtype_size(m.dtype));
  // One loss tile's rows at a time (num_vocab_tiling; all of them untiled).
  const double logit_rows =
      std::ceil(tokens / static_cast<double>(std::max<int64_t>(m.vocab_tiles, 1)));
  const double logits = logit_rows * static_cast<double>(m.vocab_size) * 4.0 /
                        static_cast<double>(std::max<int64_t>(tensor_size, 1));
  MemoryEstimate e;
  e.bytes = weights + residual + logits;
  e.detail = fmt::format("weights {} + residual stream {} + logits {}{}", format_bytes(weights),
                         format_bytes(residual), format_bytes(logits),
                         m.vocab_tiles > 1
                             ? fmt::format(" (one of num_vocab_tiling = {} tiles)", m.vocab_tiles)
                             : std::string());
  return e;
}

double inference_weight_bytes(const LlamaConfig& m, int64_t expert_ranks) {
  const double whole = parameter_bytes(m);
  if (!m.moe || expert_ranks <= 1) return whole;
  const double experts = static_cast<double>(m.num_layers) * 3.0 * static_cast<double>(m.emb_dim) *
                         static_cast<double>(m.mlp_dim) * static_cast<double>(m.num_experts) *
                         static_cast<double>(dtype_size(m.weight_dtype));
  const auto ranks = static_cast<double>(expert_ranks);
  return whole - experts * (ranks - 1.0) / ranks;
}

MemoryEstimate inference_memory(const LlamaConfig& m, int64_t slots, int64_t max_target_length,
                                int64_t ca, bool quantize_kvcache, int64_t expert_ranks) {
  const double weights = inference_weight_bytes(m, expert_ranks);
  const double element = quantize_kvcache ? 1.0 : static_cast<double>(dtype_size(m.dtype));
  const double cache = 2.0 * static_cast<double>(m.num_layers) * static_cast<double>(slots) *
                       static_cast<double>(max_target_length) *
                       static_cast<double>(m.num_kv_heads) * static_cast<double>(m.head_dim) *
                       element / static_cast<double>(std::max<int64_t>(ca, 1));
  MemoryEstimate e;
  e.bytes = weights + cache;
  e.detail = fmt::format("weights held {} + KV cache share {}", format_bytes(weights),
                         format_bytes(cache));
  return e;
}

}  // namespace maxctx::model

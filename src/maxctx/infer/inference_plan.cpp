#include "maxctx/infer/inference_plan.h"

#include <cmath>

#include "maxctx/core/split.h"
#include "maxctx/infer/microbenchmark.h"
#include "maxctx/infer/model_source.h"
#include "maxctx/model/inference.h"
#include "maxctx/model/weights.h"
#include "maxctx/parallel/kv_cache.h"
#include "maxctx/parallel/parallelize.h"

namespace maxctx::infer {
namespace {

using parallel::WeightRole;

// Whether quantization=int8 gives this weight an int8 copy (model/inference.h: every
// projection, a mixture's experts, and the head; not the embedding, norms or router).
bool quantized(const model::WeightSpec& s) {
  return s.role == WeightRole::kHeadsOrHidden || s.role == WeightRole::kIntoResidual ||
         s.role == WeightRole::kOutputHead;
}

int64_t stored_bytes(const model::WeightSpec& s, int64_t rows, bool int8, DType weight_dtype) {
  if (int8 && quantized(s)) return model::int8_weight_bytes(rows, s.cols);
  return rows * s.cols * static_cast<int64_t>(dtype_size(weight_dtype));
}

// A dense MLP projection or the head: the rows a sequence-sharded decode splits over ca.
bool row_split(const model::WeightSpec& s, const model::LlamaConfig& m) {
  if (s.role == WeightRole::kOutputHead) return true;
  return !m.moe && s.layer >= 0 && (s.name.find(".mlp.") != std::string::npos);
}

}  // namespace

InferencePlan plan_inference(const Config& c) {
  const AxisArray sizes = parallel::planned_mesh_shape(c).axis_sizes();
  const parallel::ParallelDims dims = parallel::ParallelDims::inference(sizes);
  InferencePlan p;
  p.ca = dims.context_autoregressive;
  p.expert = dims.expert;
  p.settings = inference_settings_from(c, p.ca, p.expert);
  p.model = model::llama_config_from(c);
  const model::LlamaConfig& m = p.model;
  // The weights one rank holds, as the loader reads them (rank 0's of the expert × ca group:
  // experts split evenly, so every rank holds as many bytes).
  const std::vector<model::WeightSpec> specs = inference_weight_specs(m, p.ca * p.expert, 0);
  const bool split = p.settings.decode == DecodeSharding::kSequence && p.ca > 1;
  p.weight_bytes = model::total_numel(specs) * static_cast<int64_t>(dtype_size(m.weight_dtype));
  for (const model::WeightSpec& s : specs) {
    if (s.numel() == 0) continue;  // another rank's expert
    if (p.settings.int8_weights && quantized(s)) {
      p.int8_copy_bytes += stored_bytes(s, s.rows, true, m.weight_dtype);
    }
    if (s.role == WeightRole::kEmbedding && !m.tie_embeddings) continue;  // one row per token
    const int64_t rows = split && row_split(s, m) ? split_count(s.rows, p.ca, 0) : s.rows;
    // A step reads every weight this rank holds, its experts included (InferenceWeights::
    // bytes_per_step).
    p.decode_step_bytes += stored_bytes(s, rows, p.settings.int8_weights, m.weight_dtype);
    if (split && row_split(s, m) && p.settings.int8_weights) {
      // The split part of an int8 matrix is its own copy beside the whole one.
      p.int8_copy_bytes += stored_bytes(s, rows, true, m.weight_dtype);
    }
  }
  parallel::InferenceSharding sharding;
  sharding.decode = p.settings.decode;
  sharding.slots = p.group_slots();  // the KV cache of this rank's expert group
  sharding.max_prefill_length = p.settings.max_prefill_length;
  sharding.max_target_length = p.settings.max_target_length;
  sharding.quantize_kvcache = p.settings.quantize_kvcache;
  sharding.cache_dtype = m.dtype;
  const parallel::KvCacheShape cache =
      parallel::inference_cache_shape(sharding, p.ca, m.num_layers, m.num_kv_heads, m.head_dim);
  p.kv_cache_bytes = parallel::KvCache::bytes_for(cache);
  p.decode_cache_bytes = p.kv_cache_bytes;  // a full-length step reads every row it holds
  // The workspace, and the f32 logits of every slot and of this rank's group's slots.
  p.workspace_bytes = model::inference_workspace_bytes(
                          m, InferenceEngine::workspace_rows(p.settings, p.ca, p.expert)) +
                      (p.settings.slots + p.group_slots()) * m.vocab_size * int64_t{sizeof(float)};
  return p;
}

InferenceTimes predict_inference(const InferencePlan& p, const Config& c,
                                 const HardwareProfile& profile) {
  const model::LlamaConfig& m = p.model;
  const auto kv = static_cast<double>(m.kv_dim());
  const auto L = static_cast<double>(m.num_layers);
  const double ca = static_cast<double>(p.ca);
  const double rate = profile.flops(p.settings.int8_weights ? "int8" : c.dtype);
  const LinkSpeed& link = profile.ici;
  const double element = p.settings.quantize_kvcache ? 1.0 : dtype_size(m.dtype);
  InferenceTimes t;
  for (int64_t length : microbenchmark_options(c).prefill_lengths) {
    const auto P = static_cast<double>(length);
    const double flops =
        static_cast<double>(p.settings.slots) * prefill_flops_per_prompt(m, length) / ca;
    double seconds = flops / rate;
    if (p.ca > 1) {
      // One all-gather of this rank's K | V (P/ca rows) per layer.
      const double gathered = 2 * P * kv * element;
      seconds += L * (gathered * (ca - 1) / ca / link.bandwidth + link.latency);
    }
    t.prefill.push_back({length, flops, seconds});
  }
  const double bytes = static_cast<double>(p.decode_step_bytes + p.decode_cache_bytes);
  t.decode_step_seconds = bytes / profile.memory_bandwidth;
  if (p.ca > 1) {
    // The per-layer merge of partial attention and the row split's gathers: latency-bound.
    t.decode_step_seconds += L * 4 * link.latency;
  }
  t.decode_bandwidth = bytes / t.decode_step_seconds;
  t.decode_tokens_per_second = static_cast<double>(p.settings.slots) / t.decode_step_seconds;
  return t;
}

}  // namespace maxctx::infer

#include "maxctx/plan/inference_plan.h"

#include <algorithm>
#include <cmath>
#include <span>
#include <string_view>

#include "maxctx/core/split.h"
#include "maxctx/infer/microbenchmark.h"
#include "maxctx/infer/model_source.h"
#include "maxctx/model/inference.h"
#include "maxctx/model/weights.h"
#include "maxctx/parallel/kv_cache.h"
#include "maxctx/parallel/parallelize.h"
#include "maxctx/plan/collective_time.h"
#include "maxctx/plan/inference_work.h"

namespace maxctx::plan {
namespace {

// The dtype a table kind names: "int8_decode" -> "int8", "float32_forward" -> "float32".
std::string_view base_kind(std::string_view kind) { return kind.substr(0, kind.find('_')); }

// Seconds of a stage's work on `profile`: each kernel at its measured rate where the profile has
// a table for it (plus its measured cost per call, where it has one), else on the roofline of a
// spec sheet (the slower of its FLOPs at the peak and its bytes over the memory bandwidth).
struct StageSeconds {
  double matmuls = 0, attention = 0, vectors = 0;
};

// `resident`: the stage's operands stay in the device's cache from one call to the next (a
// decode step of a model that fits it): the tables' "_cached" kinds where the profile has them.
StageSeconds stage_seconds(const StageWork& w, const HardwareProfile& profile,
                           std::string_view compute_dtype, bool resident) {
  StageSeconds t;
  const auto per_call = [&](const std::string& kind) {
    const auto it = profile.call_seconds.find(kind);
    return it == profile.call_seconds.end() ? 0.0 : it->second;
  };
  const auto table_kind = [&](const auto& tables, const std::string& kind) {
    return resident && tables.count(kind + "_cached") ? kind + "_cached" : kind;
  };
  for (const InferenceMatmul& mm : w.matmuls) {
    const std::string kind = table_kind(profile.matmul_by_size, mm.kind);
    t.matmuls += per_call(mm.kind);
    t.matmuls += profile.matmul_by_size.count(kind)
                     ? mm.timed_flops() / profile.matmul_rate(kind, mm.smallest())
                     : std::max(mm.flops() / profile.flops(base_kind(mm.kind)),
                                mm.weight_bytes / profile.memory_bandwidth);
  }
  // Attention computes in the activations' dtype whatever the cache holds.
  const std::string attention = table_kind(profile.attention_by_head_dim, w.attention_kind);
  t.attention = profile.attention_by_head_dim.count(attention)
                    ? w.attention_flops / profile.attention_rate(attention, w.head_dim)
                    : std::max(w.attention_flops /
                                   (profile.flops(compute_dtype) * profile.attention_fraction),
                               w.attention_bytes / profile.memory_bandwidth);
  for (const InferenceVectorWork& v : w.vectors) {
    t.vectors +=
        profile.vector_seconds(v.op, v.elements, v.bytes_per_element) + v.calls * per_call(v.op);
  }
  return t;
}

}  // namespace

InferencePlan plan_inference(const Config& c) {
  const MeshShape shape = parallel::planned_mesh_shape(c);
  const AxisArray sizes = shape.axis_sizes();
  const parallel::ParallelDims dims = parallel::ParallelDims::inference(sizes);
  InferencePlan p;
  p.ca = dims.context_autoregressive;
  p.expert = dims.expert;
  p.settings = infer::inference_settings_from(c, p.ca, p.expert);
  p.model = model::llama_config_from(c);
  const model::LlamaConfig& m = p.model;
  // The weights one rank holds, as the loader reads them (rank 0's of the expert × ca group:
  // experts split evenly, so every rank holds as many bytes).
  const std::vector<model::WeightSpec> specs =
      infer::inference_weight_specs(m, p.ca * p.expert, 0, p.ca, 0);
  const bool split = p.settings.decode == DecodeSharding::kSequence && p.ca > 1;
  for (const model::WeightSpec& s : specs) {
    if (s.numel() == 0) continue;  // another rank's expert
    // int8 keeps no float copy of a projection (model::int8_layout): codes and scales only.
    if (p.settings.int8_weights && int8_quantized(s)) {
      p.int8_copy_bytes += stored_weight_bytes(s, s.rows, true, m.weight_dtype);
    } else {
      p.weight_bytes += s.numel() * static_cast<int64_t>(dtype_size(m.weight_dtype));
    }
    if (s.role == parallel::WeightRole::kEmbedding && !m.tie_embeddings)
      continue;  // one row per token
    const int64_t rows = split && decode_row_split(s, m) ? split_count(s.rows, p.ca, 0) : s.rows;
    // A step reads every weight this rank holds, its experts included (InferenceWeights::
    // bytes_per_step).
    p.decode_step_bytes += stored_weight_bytes(s, rows, p.settings.int8_weights, m.weight_dtype);
    if (split && decode_row_split(s, m) && p.settings.int8_weights) {
      // The split part of an int8 matrix is its own copy beside the whole one.
      p.int8_copy_bytes += stored_weight_bytes(s, rows, true, m.weight_dtype);
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
  // A full-length sequence fills max_target_length of a slot's prefill + decode rows.
  const int64_t full_rows = p.settings.decode == DecodeSharding::kSequence
                                ? ceil_div(p.settings.max_target_length, p.ca)
                                : p.settings.max_target_length;
  p.decode_cache_bytes =
      p.kv_cache_bytes * full_rows / std::max<int64_t>(1, cache.prefill_rows + cache.decode_rows);
  // The axes the stages' collectives use, by the names the communicators count them under.
  InferenceLayout layout;
  layout.ca = p.ca;
  layout.expert = p.expert;
  layout.group_slots = p.group_slots();
  layout.expert_ranks =
      parallel::inference_expert_ranks(m.moe ? m.num_experts : 0, p.ca * p.expert);
  const auto name_of = [&](std::initializer_list<Axis> axes) {
    const std::string name =
        group_trace_name(sizes, std::span<const Axis>(axes.begin(), axes.size()));
    GroupLink link;
    for (Axis axis : axes) {
      link.ranks *= sizes[axis_index(axis)];
      link.dcn = link.dcn || shape.dcn[axis_index(axis)] > 1;
    }
    if (link.ranks > 1) p.groups[name] = link;
    return name;
  };
  layout.ca_axis = name_of({Axis::kContextAutoregressive});
  layout.expert_axis = name_of({Axis::kExpert});
  layout.expert_group_axis = name_of({Axis::kExpert, Axis::kContextAutoregressive});
  p.decode = decode_work(m, p.settings, layout, specs);
  for (int64_t length : infer::microbenchmark_options(c).prefill_lengths) {
    p.prefill.push_back({length, prefill_work(m, p.settings, layout, specs, length)});
  }
  // The workspace, and the f32 logits of every slot and of this rank's group's slots.
  p.workspace_bytes = model::inference_workspace_bytes(
                          m, infer::InferenceEngine::workspace_rows(p.settings, p.ca, p.expert),
                          layout.expert_ranks) +
                      (p.settings.slots + p.group_slots()) * m.vocab_size * int64_t{sizeof(float)};
  p.prefill_staging_bytes =
      infer::InferenceEngine::prefill_staging_bytes(p.settings, m, p.ca, p.expert);
  return p;
}

InferenceTimes predict_inference(const InferencePlan& p, const HardwareProfile& profile) {
  InferenceTimes t;
  for (const auto& [length, work] : p.prefill) {
    const StageSeconds compute =
        stage_seconds(work, profile, dtype_config_name(p.model.dtype), false);
    PrefillPoint point;
    point.length = length;
    point.flops = work.attention_flops;
    for (const InferenceMatmul& mm : work.matmuls) point.flops += mm.flops();
    point.matmul_seconds = compute.matmuls;
    point.attention_seconds = compute.attention;
    point.vector_seconds = compute.vectors;
    point.communication_seconds = communication_seconds(work.traffic, p.groups, profile);
    point.seconds =
        compute.matmuls + compute.attention + compute.vectors + point.communication_seconds;
    t.prefill.push_back(point);
  }
  // A step reads every weight this rank holds and its cache rows once: when they all fit in the
  // device's last-level cache (a small model on a CPU) they are still there for the next step.
  const double bytes = static_cast<double>(p.decode_step_bytes + p.decode_cache_bytes);
  t.decode_operands_cached = profile.cache_bytes > 0 && bytes <= profile.cache_bytes;
  const StageSeconds decode =
      stage_seconds(p.decode, profile, dtype_config_name(p.model.dtype), t.decode_operands_cached);
  t.decode_matmul_seconds = decode.matmuls;
  t.decode_attention_seconds = decode.attention;
  t.decode_vector_seconds = decode.vectors;
  t.decode_communication_seconds = communication_seconds(p.decode.traffic, p.groups, profile);
  t.decode_step_seconds =
      decode.matmuls + decode.attention + decode.vectors + t.decode_communication_seconds;
  t.decode_bandwidth = bytes / t.decode_step_seconds;
  t.decode_tokens_per_second = static_cast<double>(p.settings.slots) / t.decode_step_seconds;
  return t;
}

}  // namespace maxctx::plan

// The plan of inference (`maxctx plan` on an inference config: context_autoregressive > 1, or
// any config with plan_mode=inference): per rank the weights (a mixture's experts split over
// expert × context_autoregressive) and the KV cache the engine holds for max_target_length and
// its expert group's decode slots, the bytes a decode step streams, and predicted
// prefill and decode times on a hardware profile. The cache is parallelize_inference's own shape
// (inference_cache_shape, KvCache::bytes_for); the weights come from the weight list.
//
// Weights as the engine holds them: the flat buffer in weight_dtype, which with
// quantization=int8 holds only the tensors that stay float (embedding, norms, router), and the
// int8 copy (codes + a f32 scale and row sum per row) of every projection and the head. Times: each
// stage's work kernel by kernel (inference_work.h: the matmuls at their shapes, attention, the
// vector kernels) at the profile's measured rates, or for a profile without them (the spec sheets)
// the bytes each streams over the memory bandwidth; plus the prefill's K/V all-gathers and the
// decode step's merge collectives (one latency each).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "maxctx/config/config.h"
#include "maxctx/infer/engine.h"
#include "maxctx/model/llama_config.h"
#include "maxctx/plan/collective_time.h"
#include "maxctx/plan/hardware_profile.h"
#include "maxctx/plan/inference_work.h"

namespace maxctx::plan {

struct PrefillPoint {
  int64_t length = 0;  // prompt tokens
  double flops = 0;    // per rank, executed (the matmuls at their shapes and causal attention)
  double seconds = 0;  // the sum of the four below
  double matmul_seconds = 0, attention_seconds = 0, vector_seconds = 0;
  double communication_seconds = 0;
};

struct PrefillWork {
  int64_t length = 0;
  StageWork work;
};

struct InferencePlan {
  int64_t ca = 1;
  int64_t expert = 1;  // slot groups; a mixture's experts split over expert × ca
  infer::InferenceSettings settings;
  model::LlamaConfig model;
  int64_t weight_bytes = 0;     // the float weights, weight_dtype (int8: not the projections)
  int64_t int8_copy_bytes = 0;  // quantization=int8: codes and scales of the projections
  int64_t kv_cache_bytes = 0;   // this rank's cache (KvCache::bytes)
  int64_t workspace_bytes = 0;  // the forward's workspace and the (slots, V) f32 logits
  // The prefill attention's staging after its largest pass (infer::InferenceEngine::
  // prefill_staging_bytes): gathered K/V and, for a prompt in token chunks, the prefix's buffers.
  int64_t prefill_staging_bytes = 0;
  int64_t decode_step_bytes = 0;   // weights a decode step streams on this rank
  int64_t decode_cache_bytes = 0;  // cache rows a step reads at full length (this rank)
  int64_t group_slots() const { return settings.slots / expert; }  // this rank's group's
  StageWork decode;                                                // a decode step at full length
  std::map<std::string, GroupLink> groups;  // the axes the stages' traffic uses
  std::vector<PrefillWork> prefill;         // per inference_microbenchmark_prefill_lengths
  int64_t total() const {
    return weight_bytes + int8_copy_bytes + kv_cache_bytes + workspace_bytes +
           prefill_staging_bytes;
  }
};

struct InferenceTimes {
  std::vector<PrefillPoint> prefill;
  double decode_step_seconds = 0;  // the sum of the four below
  double decode_matmul_seconds = 0, decode_attention_seconds = 0, decode_vector_seconds = 0;
  double decode_communication_seconds = 0;
  // The step's weights and cache rows fit the profile's cache_bytes: timed at its "_cached"
  // rates (they stay in the cache between steps).
  bool decode_operands_cached = false;
  double decode_bandwidth = 0;          // bytes/s the step streams
  double decode_tokens_per_second = 0;  // slots / step time (the job's)
};

InferencePlan plan_inference(const Config& config);
InferenceTimes predict_inference(const InferencePlan& plan, const HardwareProfile& profile);

}  // namespace maxctx::plan

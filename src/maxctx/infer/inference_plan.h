// The plan of inference (`maxctx plan` on an inference config: context_autoregressive > 1, or
// any config with plan_mode=inference): per rank the weights (a mixture's experts split over
// expert × context_autoregressive) and the KV cache the engine holds for max_target_length and
// its expert group's decode slots, the bytes a decode step streams, and predicted
// prefill and decode times on a hardware profile. The cache is parallelize_inference's own shape
// (inference_cache_shape, KvCache::bytes_for); the weights come from the weight list.
//
// Weights as the engine holds them after quantizing on load: the flat buffer in weight_dtype,
// plus with quantization=int8 an int8 copy (codes + a f32 scale per row) of every projection and
// the head. Times: prefill = its FLOPs (MaxText's forward count, causal attention halved) over
// the profile's rate, split over ca, plus the K/V all-gathers; a decode step = the bytes it
// streams (weights as stored, this rank's part of the MLP and head rows under a sequence-sharded
// split, and the cache of one full sequence per slot) over the memory bandwidth, plus one
// merge collective per layer.
#pragma once

#include <cstdint>
#include <vector>

#include "maxctx/config/config.h"
#include "maxctx/config/hardware_profile.h"
#include "maxctx/infer/engine.h"
#include "maxctx/model/llama_config.h"

namespace maxctx::infer {

struct PrefillPoint {
  int64_t length = 0;  // prompt tokens
  double flops = 0;    // per rank
  double seconds = 0;
};

struct InferencePlan {
  int64_t ca = 1;
  int64_t expert = 1;  // slot groups; a mixture's experts split over expert × ca
  InferenceSettings settings;
  model::LlamaConfig model;
  int64_t weight_bytes = 0;        // the flat weights, weight_dtype
  int64_t int8_copy_bytes = 0;     // quantization=int8: codes and scales of the projections
  int64_t kv_cache_bytes = 0;      // this rank's cache (KvCache::bytes)
  int64_t workspace_bytes = 0;     // the forward's workspace and the (slots, V) f32 logits
  int64_t decode_step_bytes = 0;   // weights a decode step streams on this rank
  int64_t decode_cache_bytes = 0;  // cache rows a step reads at full length (this rank)
  int64_t group_slots() const { return settings.slots / expert; }  // this rank's group's
  int64_t total() const {
    return weight_bytes + int8_copy_bytes + kv_cache_bytes + workspace_bytes;
  }
};

struct InferenceTimes {
  std::vector<PrefillPoint> prefill;
  double decode_step_seconds = 0;
  double decode_bandwidth = 0;          // bytes/s the step streams
  double decode_tokens_per_second = 0;  // slots / step time (the job's)
};

InferencePlan plan_inference(const Config& config);
InferenceTimes predict_inference(const InferencePlan& plan, const Config& config,
                                 const HardwareProfile& profile);

}  // namespace maxctx::infer

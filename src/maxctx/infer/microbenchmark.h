// MaxText's inference_microbenchmark on the engine: prefill time and TFLOP/s per device for each
// prefill length, the autoregressive step time, throughput and memory bandwidth, and the model
// and cache sizes, as text lines and as JSON with MaxText's key names.
//
// Timing: wall clock over `iters` calls after `warmup` (MaxText's _WARMUP_ITERS = 2), each call
// started after a barrier over the axis and its time the slowest rank's. TFLOPs follow MaxText's
// calculate_prefill_tflops_per_device (2·params·L + 2·Hq·layers·D·L², per prompt, over the
// devices). One difference, stated: MaxText's bw_per_device_GB_per_second divides the model
// bytes by the device count because its weights are sharded; here they are replicated over
// context_autoregressive, so the bytes are what one device actually streams per step: every
// weight as stored plus its shard of the cache rows in use (bytes_per_device_per_step).
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <vector>

#include "maxctx/config/config.h"
#include "maxctx/infer/engine.h"

namespace maxctx::infer {

struct MicrobenchmarkOptions {
  std::vector<int64_t> prefill_lengths;  // inference_microbenchmark_prefill_lengths
  bool prefill = true;                   // "prefill" in inference_microbenchmark_stages
  bool generate = true;                  // "generate"
  int64_t iters = 10;                    // inference_microbenchmark_loop_iters
  int64_t warmup = 2;
};

// Parses the inference_microbenchmark_* keys; an error names the key and what is allowed.
MicrobenchmarkOptions microbenchmark_options(const Config& config);

// The FLOPs of one prompt's prefill as MaxText's microbenchmark counts them: 2 per parameter
// per token, plus causal attention (4·L²·Hq·D·layers / 2).
double prefill_flops_per_prompt(const model::LlamaConfig& model, int64_t length);

struct PrefillTiming {
  int64_t length = 0;
  double time_ms = 0.0;
  double total_tflops_per_device = 0.0;
  double tflops_per_sec_per_device = 0.0;
};

struct ArTiming {
  int64_t context = 0;  // tokens per slot before the first timed step
  double step_ms = 0.0;
  double step_ms_per_seq = 0.0;
  int64_t global_batch_size = 0;
  double tokens_per_second = 0.0;
  int64_t bytes_per_device_per_step = 0;
  double bw_per_device_gb_per_second = 0.0;
};

// Prefill of every slot with a prompt of `length` tokens, timed.
PrefillTiming benchmark_prefill(InferenceEngine& engine, int64_t length, int64_t iters,
                                int64_t warmup);
// Decode steps of every slot from the engine's current state (after a prefill or
// fill_synthetic), timed; the context grows by one token per step.
ArTiming benchmark_autoregressive(InferenceEngine& engine, int64_t iters, int64_t warmup);

// The whole microbenchmark: prefill of each length, then (generate) the AR stage after a
// prefill of the last length, as MaxText decodes after inserting its prefills. Prints MaxText's
// lines on rank 0 and returns the results JSON (identical on every rank).
nlohmann::json run_inference_microbenchmark(InferenceEngine& engine,
                                            const MicrobenchmarkOptions& options);

nlohmann::json to_json(const PrefillTiming& timing);
nlohmann::json to_json(const ArTiming& timing);

}  // namespace maxctx::infer

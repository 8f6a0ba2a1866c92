#include "maxctx/infer/microbenchmark.h"

#include <chrono>
#include <span>
#include <sstream>
#include <string>

#include "maxctx/core/check.h"
#include "maxctx/core/log.h"

namespace maxctx::infer {
namespace {

std::vector<std::string> split_list(const std::string& text) {
  std::vector<std::string> items;
  std::stringstream in(text);
  std::string item;
  while (std::getline(in, item, ',')) {
    const auto begin = item.find_first_not_of(' ');
    const auto end = item.find_last_not_of(' ');
    if (begin != std::string::npos) items.push_back(item.substr(begin, end - begin + 1));
  }
  return items;
}

// Seconds of the slowest rank for one call of `fn`, all ranks starting together.
template <typename Fn>
double timed(const Communicator& axis, Fn fn) {
  axis.barrier();
  const auto start = std::chrono::steady_clock::now();
  fn();
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  axis.all_reduce(std::span<double>(&seconds, 1), ReduceOp::kMax);
  return seconds;
}

std::vector<std::vector<int32_t>> synthetic_prompts(int64_t slots, int64_t length, int64_t vocab) {
  std::vector<std::vector<int32_t>> prompts(static_cast<size_t>(slots));
  for (int64_t b = 0; b < slots; ++b) {
    for (int64_t i = 0; i < length; ++i) {
      prompts[b].push_back(static_cast<int32_t>((b * 31 + i * 7 + 3) % vocab));
    }
  }
  return prompts;
}

}  // namespace

MicrobenchmarkOptions microbenchmark_options(const Config& c) {
  MicrobenchmarkOptions o;
  for (const std::string& item : split_list(c.inference_microbenchmark_prefill_lengths)) {
    try {
      size_t used = 0;
      const int64_t length = std::stoll(item, &used);
      if (used != item.size() || length < 1) throw std::invalid_argument(item);
      o.prefill_lengths.push_back(length);
    } catch (const std::exception&) {
      fail(
          "inference_microbenchmark_prefill_lengths = '{}': '{}' is not a length; give "
          "comma-separated positive integers",
          c.inference_microbenchmark_prefill_lengths, item);
    }
  }
  o.prefill = o.generate = false;
  for (const std::string& stage : split_list(c.inference_microbenchmark_stages)) {
    if (stage == "prefill") {
      o.prefill = true;
    } else if (stage == "generate") {
      o.generate = true;
    } else {
      fail("inference_microbenchmark_stages = '{}': stage '{}' is not one of prefill, generate",
           c.inference_microbenchmark_stages, stage);
    }
  }
  if ((o.prefill || o.generate) && o.prefill_lengths.empty()) {
    fail("inference_microbenchmark_prefill_lengths is empty: give at least one length");
  }
  if (c.inference_microbenchmark_loop_iters < 1) {
    fail("inference_microbenchmark_loop_iters = {}: allowed >= 1",
         c.inference_microbenchmark_loop_iters);
  }
  o.iters = c.inference_microbenchmark_loop_iters;
  return o;
}

double prefill_flops_per_prompt(const model::LlamaConfig& m, int64_t length) {
  const double L = double(length);
  return 2.0 * double(m.num_parameters()) * L +
         4.0 * double(m.num_query_heads * m.num_layers * m.head_dim) * L * L / 2;
}

PrefillTiming benchmark_prefill(InferenceEngine& engine, int64_t length, int64_t iters,
                                int64_t warmup) {
  const model::LlamaConfig& m = engine.model_config();
  const auto prompts = synthetic_prompts(engine.slots(), length, m.vocab_size);
  for (int64_t i = 0; i < warmup; ++i) engine.prefill(prompts);
  double seconds = 0.0;
  for (int64_t i = 0; i < iters; ++i) {
    seconds += timed(engine.devices(), [&] { engine.prefill(prompts); });
  }
  PrefillTiming t;
  t.length = length;
  t.time_ms = seconds / double(iters) * 1e3;
  const double devices = double(engine.ca() * engine.expert());
  const double per_prompt = prefill_flops_per_prompt(m, length);
  t.total_tflops_per_device = double(engine.slots()) * per_prompt / devices / 1e12;
  t.tflops_per_sec_per_device = t.total_tflops_per_device / (t.time_ms / 1e3);
  return t;
}

ArTiming benchmark_autoregressive(InferenceEngine& engine, int64_t iters, int64_t warmup) {
  const int64_t B = engine.slots();
  int64_t longest = 0;
  for (int64_t b = 0; b < B; ++b) longest = std::max(longest, engine.length(b));
  const int64_t T = engine.settings().max_target_length;
  if (longest + warmup + iters >= T) {
    fail(
        "the AR benchmark decodes {} steps after a context of {} tokens: max_target_length = {} "
        "leaves room for {}; raise max_target_length",
        warmup + iters, longest, T, T - 1 - longest);
  }
  const std::vector<int32_t> tokens(static_cast<size_t>(B), 1);
  const std::vector<uint8_t> active(static_cast<size_t>(B), 1);
  for (int64_t i = 0; i < warmup; ++i) engine.decode_step(tokens, active);
  ArTiming t;
  t.context = longest + warmup;
  double seconds = 0.0;
  int64_t bytes = 0;
  for (int64_t i = 0; i < iters; ++i) {
    seconds += timed(engine.devices(), [&] { engine.decode_step(tokens, active); });
    // What the step streamed: every weight and this rank's cache rows in use after its append.
    bytes +=
        engine.weights().bytes_per_step(engine.decode_row_split()) + engine.cache().bytes_in_use();
  }
  const double step_s = seconds / double(iters);
  t.step_ms = step_s * 1e3;
  t.step_ms_per_seq = t.step_ms / double(B);
  t.global_batch_size = B;
  t.tokens_per_second = double(B) / step_s;
  t.bytes_per_device_per_step = bytes / iters;
  t.bw_per_device_gb_per_second = double(t.bytes_per_device_per_step) / 1e9 / step_s;
  return t;
}

nlohmann::json to_json(const PrefillTiming& t) {
  return {{"time_in_ms", t.time_ms},
          {"total_tflops_per_device", t.total_tflops_per_device},
          {"tflops_per_sec_per_device", t.tflops_per_sec_per_device}};
}

nlohmann::json to_json(const ArTiming& t) {
  return {{"step_in_ms", t.step_ms},
          {"step_in_ms_per_seq", t.step_ms_per_seq},
          {"global_batch_size", t.global_batch_size},
          {"total_throughput_tokens_per_second", t.tokens_per_second},
          {"bw_per_device_GB_per_second", t.bw_per_device_gb_per_second},
          {"bytes_per_device_per_step", t.bytes_per_device_per_step},
          {"context_tokens", t.context}};
}

nlohmann::json run_inference_microbenchmark(InferenceEngine& engine,
                                            const MicrobenchmarkOptions& o) {
  const int64_t Lp = engine.settings().max_prefill_length;
  for (int64_t length : o.prefill_lengths) {
    if (length > Lp) {
      fail(
          "inference_microbenchmark_prefill_lengths holds {}, longer than "
          "max_prefill_predict_length = {}",
          length, Lp);
    }
  }
  const model::LlamaConfig& m = engine.model_config();
  nlohmann::json results;
  const double gb = 1e9;
  // The head as this rank stores it: its rows of the vocabulary (split over ca), int8 or not.
  const model::Linear& head = engine.weights().lm_head;
  const int64_t head_bytes = m.tie_embeddings ? 0
                             : head.i8 != nullptr
                                 ? model::int8_weight_bytes(head.out_dim, head.in_dim)
                                 : static_cast<int64_t>(head.weight.bytes());
  results["sizes"] = {
      // The whole model: a rank holds 1/expert_ranks of the experts and 1/ca of the head's rows
      // (evenly split), the embedding is counted whole.
      {"model_size_in_gb",
       double(engine.weights().bytes_per_step() +
              engine.weights().expert_bytes() * (engine.expert_ranks() - 1) +
              head_bytes * (engine.ca() - 1) + m.vocab_size * m.emb_dim * int64_t{sizeof(float)}) /
           gb},
      {"cache_size_in_gb",
       double(engine.cache().bytes()) * double(engine.ca() * engine.expert()) / gb},
      {"model_params_in_billions", double(m.num_parameters()) / 1e9}};
  log::info("Model: {:.4f} GB, {:.6f} billion parameters; KV cache: {:.4f} GB ({} per device)",
            results["sizes"]["model_size_in_gb"].get<double>(),
            results["sizes"]["model_params_in_billions"].get<double>(),
            results["sizes"]["cache_size_in_gb"].get<double>(), engine.cache().bytes());
  // Not a MaxText key: what this rank holds (only its experts when they split over ranks).
  log::info("Weights held per device: {} bytes (with their int8 copies)",
            engine.resident_weight_bytes());
  if (o.prefill) {
    for (int64_t length : o.prefill_lengths) {
      const PrefillTiming t = benchmark_prefill(engine, length, o.iters, o.warmup);
      log::info(
          "Prefill benchmark results for length {}:\n\tPrefill step average time: {:.3f} ms\n"
          "\tPrefill total TFLOPs/device: {:.6f}\n\tPrefill TFLOPs/sec/device: {:.6f}",
          length, t.time_ms, t.total_tflops_per_device, t.tflops_per_sec_per_device);
      results["prefill"][std::to_string(length)] = to_json(t);
    }
    // Not a MaxText key: the prefill's workspace on this rank, measured (the pages of its
    // buffers the forwards wrote) with the attention's staging: what `maxctx plan` bounds.
    const int64_t resident = engine.workspace_resident_bytes();
    const int64_t staging = engine.prefill_staging_held();
    log::info(
        "Prefill workspace per device: {} bytes (forward buffers resident {}, attention "
        "staging {})",
        resident + staging, resident, staging);
    results["prefill_workspace_per_device"] = {{"forward_buffers_resident_bytes", resident},
                                               {"attention_staging_bytes", staging}};
  }
  if (o.generate) {
    const int64_t length = o.prefill_lengths.back();
    std::vector<std::vector<int32_t>> prompts(static_cast<size_t>(engine.slots()),
                                              std::vector<int32_t>(static_cast<size_t>(length), 1));
    engine.prefill(prompts);
    const ArTiming t = benchmark_autoregressive(engine, o.iters, o.warmup);
    log::info(
        "AutoRegressive results:\n\tAR step average time: {:.3f} ms\n\tAR step average time per "
        "seq: {:.3f} ms\n\tAR global batch size: {}\n\tAR throughput: {:.3f} tokens/second\n\tAR "
        "memory bandwidth per device: {:.3f} GB/s",
        t.step_ms, t.step_ms_per_seq, t.global_batch_size, t.tokens_per_second,
        t.bw_per_device_gb_per_second);
    results["autoregressive"] = to_json(t);
  }
  return results;
}

}  // namespace maxctx::infer

// Training throughput accounting and the per-step metric log, in MaxText's terms.
//
// TFLOPs per device per step follow maxtext_utils.calculate_tflops_training_per_device for a
// dense Llama block (a mixture of experts: see FlopsModel), with B = per_device_batch_size
// (fractional under context parallelism):
//   ffn  = 2·B·S·mlp·E·len(mlp_activations) + 2·B·S·mlp·E
//   qkv  = 2·B·S·E·(Hq + 2·Hkv)·D        proj = 2·B·S·E·Hq·D
//   attn = 4·B·S²·Hq·D / 2 (causal)       embed = 2·B·S·E·V
//   learnable = ((ffn + qkv + proj)·L + embed)·3 / 1e12,  attention = attn·L·3 / 1e12
// both × gradient_accumulation_steps (×3: forward + backward). These are model FLOPs, not what
// a kernel executes (no recompute, masked blocks counted as MaxText counts them).
// The logger, on rank 0: MaxText's step line on the console for the first step, every
// log_period-th and the last (a terminal also gets one progress line rewritten in place every
// step: loss, tokens/s, ETA; piped output has no escape codes); one JSON object per step
// (MaxText's metric names) in a JSONL file; the same numbers as TensorBoard scalars.
#pragma once

#include <cstdint>
#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

namespace maxctx {

struct Config;
class TensorBoardWriter;

struct FlopsModel {
  int64_t emb_dim = 0;
  int64_t num_query_heads = 0;
  int64_t num_kv_heads = 0;
  int64_t head_dim = 0;
  int64_t mlp_dim = 0;
  int64_t num_layers = 0;
  int64_t vocab_size = 0;
  int64_t num_mlp_activations = 2;  // len(mlp_activations): 2 for SwiGLU
  // A mixture of experts (num_experts > 1): MaxText counts the router (gate = 2·B·S·E·X) and
  // num_experts_per_tok experts' ffn per token.
  int64_t num_experts = 1;
  int64_t num_experts_per_tok = 1;
};

// From the derived model dims of a resolved config.
FlopsModel flops_model(const Config& config);

struct TrainingTflops {
  double total = 0.0;
  double learnable_weight = 0.0;
  double attention = 0.0;
};

TrainingTflops training_tflops_per_device(const FlopsModel& model, double per_device_batch_size,
                                          int64_t seq_len, int64_t gradient_accumulation_steps = 1);
// max_target_length · per_device_batch_size · gradient_accumulation_steps.
double training_tokens_per_device(double per_device_batch_size, int64_t seq_len,
                                  int64_t gradient_accumulation_steps = 1);

struct StepMetrics {
  int64_t step = 0;      // 0-based, as MaxText prints it
  double seconds = 0.0;  // wall time since the previous step completed
  double loss = 0.0;
  int64_t total_weights = 0;   // scored targets over the global batch
  double learning_rate = 0.0;  // the rate this step's update used
  double grad_norm = 0.0;      // after clipping (MaxText's learning/grad_norm)
  double raw_grad_norm = 0.0;  // before clipping
  // Anything else, written to the JSONL and TensorBoard under these names (e.g.
  // "learning/accuracy"; an eval's "eval/avg_loss" and "eval/accuracy", which `maxctx plot`
  // draws dashed beside the training curves).
  std::vector<std::pair<std::string, double>> extra;
};

// "completed step: N, seconds: X.XXX, TFLOP/s/device: Y.YYY, Tokens/s/device: Z.ZZZ,
// total_weights: W, loss: L.LLL".
std::string format_step_line(const StepMetrics& metrics, double tflops_per_device,
                             double tokens_per_device);

// {"step", "run_name", "learning/loss", "learning/total_weights", "learning/grad_norm",
//  "learning/raw_grad_norm", "learning/current_learning_rate", "perf/step_time_seconds",
//  "perf/per_device_tflops", "perf/per_device_tflops_per_sec", "perf/per_device_tokens",
//  "perf/per_device_tokens_per_sec", extra...}.
nlohmann::json step_metrics_json(const StepMetrics& metrics, double tflops_per_device,
                                 double tokens_per_device, const std::string& run_name);

// "step 12/100 [12.0%] 1.234 s/step, ETA 1m48s".
std::string format_progress(int64_t steps_done, int64_t total_steps, double seconds_per_step);

struct MetricLoggerOptions {
  std::string jsonl_path;  // "" writes no file
  std::string run_name;
  int64_t total_steps = 0;
  double tflops_per_device = 0.0;  // per step, training_tflops_per_device(...).total
  double tokens_per_device = 0.0;  // per step
  int64_t flush_period = 100;      // log_period: step lines and flushes every this many steps
  std::string tensorboard_dir;     // "" writes no event file
  // -1: a fresh run, the file is truncated. Else the run resumed from a checkpoint after this
  // many steps: the rows of the steps before it stay, and those at or after it (logged before a
  // crash by a run that had gone past that checkpoint) are dropped, so every step appears once.
  int64_t resumed_at_step = -1;
};

// Rank 0 prints and writes; on other ranks log_step does nothing.
class MetricLogger {
 public:
  explicit MetricLogger(const MetricLoggerOptions& options);
  ~MetricLogger();
  MetricLogger(const MetricLogger&) = delete;
  MetricLogger& operator=(const MetricLogger&) = delete;

  void log_step(const StepMetrics& metrics);
  // Throws maxctx::Error when the file cannot take the lines (disk full, I/O error).
  void flush();

 private:
  MetricLoggerOptions options_;
  std::unique_ptr<FILE, int (*)(FILE*)> jsonl_;
  std::unique_ptr<TensorBoardWriter> tensorboard_;
  bool show_progress_ = false;
  int64_t logged_ = 0;
  double timed_seconds_ = 0.0;  // step times after the first (which includes warm-up)
};

}  // namespace maxctx

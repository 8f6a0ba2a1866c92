#include "maxctx/train/metrics.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "maxctx/config/config.h"
#include "maxctx/core/check.h"
#include "maxctx/core/input_file.h"
#include "maxctx/core/json_checks.h"
#include "maxctx/core/log.h"
#include "maxctx/io/durable_file.h"
#include "maxctx/io/tensorboard.h"

namespace maxctx {

FlopsModel flops_model(const Config& config) {
  FlopsModel model;
  model.emb_dim = config.derived.emb_dim;
  model.num_query_heads = config.derived.num_query_heads;
  model.num_kv_heads = config.derived.num_kv_heads;
  model.head_dim = config.head_dim;
  model.mlp_dim = config.derived.mlp_dim;
  model.num_layers = config.derived.num_decoder_layers;
  model.vocab_size = config.vocab_size;
  model.num_mlp_activations = static_cast<int64_t>(config.mlp_activations.size());
  model.num_experts = config.num_experts;
  model.num_experts_per_tok = config.num_experts_per_tok;
  return model;
}

TrainingTflops training_tflops_per_device(const FlopsModel& m, double per_device_batch_size,
                                          int64_t seq_len, int64_t gradient_accumulation_steps) {
  // In double throughout: B·S²·Hq·D overflows int64 long before it overflows a double's range.
  const double b = per_device_batch_size;
  const auto s = static_cast<double>(seq_len);
  const auto e = static_cast<double>(m.emb_dim);
  const auto mlp = static_cast<double>(m.mlp_dim);
  const auto hq = static_cast<double>(m.num_query_heads);
  const auto hkv = static_cast<double>(m.num_kv_heads);
  const auto d = static_cast<double>(m.head_dim);
  const auto layers = static_cast<double>(m.num_layers);
  double ffn =
      2 * b * s * mlp * e * static_cast<double>(m.num_mlp_activations) + 2 * b * s * mlp * e;
  if (m.num_experts > 1) {
    ffn = ffn * static_cast<double>(m.num_experts_per_tok) +
          2 * b * s * e * static_cast<double>(m.num_experts);
  }
  const double qkv = 2 * b * s * e * (hq + 2 * hkv) * d;
  const double proj = 2 * b * s * e * hq * d;
  const double causal_attention = 4 * b * s * s * hq * d / 2;
  const double embed = 2 * b * s * e * static_cast<double>(m.vocab_size);
  const auto accumulation = static_cast<double>(gradient_accumulation_steps);
  TrainingTflops tflops;
  tflops.learnable_weight = ((ffn + qkv + proj) * layers + embed) * 3 / 1e12 * accumulation;
  tflops.attention = causal_attention * layers * 3 / 1e12 * accumulation;
  tflops.total = tflops.learnable_weight + tflops.attention;
  return tflops;
}

double training_tokens_per_device(double per_device_batch_size, int64_t seq_len,
                                  int64_t gradient_accumulation_steps) {
  return static_cast<double>(seq_len) * per_device_batch_size *
         static_cast<double>(gradient_accumulation_steps);
}

std::string format_step_line(const StepMetrics& metrics, double tflops_per_device,
                             double tokens_per_device) {
  return fmt::format(
      "completed step: {}, seconds: {:.3f}, TFLOP/s/device: {:.3f}, Tokens/s/device: {:.3f}, "
      "total_weights: {}, loss: {:.3f}",
      metrics.step, metrics.seconds, tflops_per_device / metrics.seconds,
      tokens_per_device / metrics.seconds, metrics.total_weights, metrics.loss);
}

nlohmann::json step_metrics_json(const StepMetrics& metrics, double tflops_per_device,
                                 double tokens_per_device, const std::string& run_name) {
  nlohmann::json line = {
      {"step", metrics.step},
      {"run_name", run_name},
      {"learning/loss", metrics.loss},
      {"learning/total_weights", metrics.total_weights},
      {"learning/grad_norm", metrics.grad_norm},
      {"learning/raw_grad_norm", metrics.raw_grad_norm},
      {"learning/current_learning_rate", metrics.learning_rate},
      {"perf/step_time_seconds", metrics.seconds},
      {"perf/per_device_tflops", tflops_per_device},
      {"perf/per_device_tflops_per_sec", tflops_per_device / metrics.seconds},
      {"perf/per_device_tokens", tokens_per_device},
      {"perf/per_device_tokens_per_sec", tokens_per_device / metrics.seconds},
  };
  for (const auto& [name, value] : metrics.extra) line[name] = value;
  return line;
}

std::string format_progress(int64_t steps_done, int64_t total_steps, double seconds_per_step) {
  const double percent =
      total_steps > 0 ? 100.0 * static_cast<double>(steps_done) / static_cast<double>(total_steps)
                      : 100.0;
  const int64_t left = total_steps > steps_done ? total_steps - steps_done : 0;
  const auto eta = static_cast<int64_t>(std::llround(seconds_per_step * static_cast<double>(left)));
  const std::string eta_text = eta >= 3600 ? fmt::format("{}h{:02}m", eta / 3600, (eta % 3600) / 60)
                                           : fmt::format("{}m{:02}s", eta / 60, eta % 60);
  return fmt::format("step {}/{} [{:.1f}%] {:.3f} s/step, ETA {}", steps_done, total_steps, percent,
                     seconds_per_step, eta_text);
}

namespace {

// Whether a launcher (mpirun, srun) started this process: its variables in the environment the
// process started with. /proc/self/environ is that environment; getenv is not, since a
// singleton's MPI_Init adds Open MPI's variables to it.
bool started_by_mpi_launcher() {
  std::ifstream in("/proc/self/environ", std::ios::binary);
  std::string entry;
  while (std::getline(in, entry, '\0')) {
    for (const char* name : {"OMPI_COMM_WORLD_SIZE=", "PMI_SIZE=", "PMIX_RANK="}) {
      if (entry.starts_with(name)) return true;
    }
  }
  return false;
}

// Rewrites the metrics file without the rows of step >= `step` and without a last line a crash
// cut short (it does not parse): written beside it, synced and renamed over it.
void drop_rows_from_step(const std::string& path, int64_t step) {
  std::error_code missing;
  if (!std::filesystem::exists(std::filesystem::symlink_status(path, missing))) return;  // none yet
  InputFile in(path, "metrics file", kAnySize);
  std::string kept, line;
  int64_t dropped = 0;
  while (in.read_line(line)) {
    // A line nested too deep is not a row maxctx wrote: dropped without building its tree.
    const nlohmann::json row =
        check_json(line).error ? nlohmann::json() : nlohmann::json::parse(line, nullptr, false);
    const bool keep = row.is_object() && (!row.contains("step") || !row["step"].is_number() ||
                                          row["step"].get<int64_t>() < step);
    if (keep) {
      kept += line;
      kept += '\n';
    } else {
      ++dropped;
    }
  }
  if (dropped == 0) return;
  const std::string tmp = path + ".tmp";
  io::write_synced_text(tmp, kept);
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  if (ec) fail("cannot replace the metrics file {}: {}", path, ec.message());
  log::info("metrics: dropped {} rows of steps from {} on (logged after the checkpoint resumed)",
            dropped, step);
}

}  // namespace

MetricLogger::MetricLogger(const MetricLoggerOptions& options)
    : options_(options), jsonl_(nullptr, &std::fclose) {
  if (log::rank() != 0) return;
  if (!options_.jsonl_path.empty()) {
    const bool append = options_.resumed_at_step >= 0;
    if (append) drop_rows_from_step(options_.jsonl_path, options_.resumed_at_step);
    // O_NOFOLLOW: a symlink planted at metrics.jsonl must not make the run truncate or append
    // to its target (issue #34 N7).
    const int flags = O_WRONLY | O_CREAT | O_NOFOLLOW | O_CLOEXEC | (append ? O_APPEND : O_TRUNC);
    const int fd = ::open(options_.jsonl_path.c_str(), flags, 0644);
    if (fd >= 0) jsonl_.reset(::fdopen(fd, append ? "a" : "w"));
    if (!jsonl_) {
      const int error = errno;
      if (fd >= 0) ::close(fd);
      fail("cannot open the metrics file {}: {}{}", options_.jsonl_path, std::strerror(error),
           error == ELOOP ? " (it is a symlink; maxctx does not write through one)" : "");
    }
  }
  if (!options_.tensorboard_dir.empty()) {
    tensorboard_ = std::make_unique<TensorBoardWriter>(options_.tensorboard_dir);
  }
  // Under an MPI launcher stdout is a pseudo-terminal of the launcher's, whatever mpirun's own
  // output is (a file, a pipe): no progress line there, only whole lines.
  show_progress_ = ::isatty(STDOUT_FILENO) == 1 && !started_by_mpi_launcher();
}

MetricLogger::~MetricLogger() {
  if (show_progress_ && logged_ > 0) std::fputs("\r\033[K", stdout);
  // No throwing from a destructor: the trainer's own flush at the end of the run has reported
  // any error; this one only catches the lines of a run that ended by an exception.
  if (jsonl_) std::fflush(jsonl_.get());
}

void MetricLogger::log_step(const StepMetrics& metrics) {
  if (log::rank() != 0) return;
  ++logged_;
  const bool last = metrics.step + 1 == options_.total_steps;
  const bool periodic =
      options_.flush_period > 0 && (metrics.step + 1) % options_.flush_period == 0;
  if (logged_ == 1 || periodic || last) {
    // The progress line has no newline; wipe it before the log line lands on top of it.
    if (show_progress_) std::fputs("\r\033[K", stdout);
    log::info("{}",
              format_step_line(metrics, options_.tflops_per_device, options_.tokens_per_device));
  }
  const nlohmann::json record = step_metrics_json(metrics, options_.tflops_per_device,
                                                  options_.tokens_per_device, options_.run_name);
  if (tensorboard_) {
    std::vector<std::pair<std::string, double>> scalars;
    for (const auto& [name, value] : record.items()) {
      if (name != "step" && value.is_number()) scalars.emplace_back(name, value.get<double>());
    }
    tensorboard_->add_scalars(metrics.step, scalars);
  }
  if (jsonl_) {
    const std::string line = record.dump() + "\n";
    if (std::fwrite(line.data(), 1, line.size(), jsonl_.get()) != line.size()) {
      fail("cannot write the metrics file {}: {}", options_.jsonl_path, std::strerror(errno));
    }
  }
  if (logged_ > 1) timed_seconds_ += metrics.seconds;
  if (options_.flush_period > 0 && logged_ % options_.flush_period == 0) flush();
  if (show_progress_ && !last) {
    // The first step carries the warm-up; the ETA uses the later ones once there are any.
    const double per_step =
        logged_ > 1 ? timed_seconds_ / static_cast<double>(logged_ - 1) : metrics.seconds;
    const std::string progress =
        fmt::format("{}, loss {:.3f}, {:.0f} tokens/s/device",
                    format_progress(metrics.step + 1, options_.total_steps, per_step), metrics.loss,
                    options_.tokens_per_device / metrics.seconds);
    std::fputs(("\r\033[K" + progress).c_str(), stdout);  // rewrites the line in place
    std::fflush(stdout);
  }
}

void MetricLogger::flush() {
  if (jsonl_ && std::fflush(jsonl_.get()) != 0) {
    fail("cannot write the metrics file {}: {}", options_.jsonl_path, std::strerror(errno));
  }
  if (tensorboard_) tensorboard_->flush();
}

}  // namespace maxctx

// Training-step benchmark on one rank and one thread: a real Trainer step of maxctx-20m at
// S = 2048 (data, forward, backward, clipping, AdamW), timed after a warm-up step, in
// MaxText's TFLOP/s/device and as a fraction of this core's measured FMA peak; peak resident
// memory; and where the step's time goes.
//
// The breakdown runs the same model outside the Trainer: llama_forward alone and forward +
// backward, with the attention plan wrapped in a timer, and the model's matmuls replayed at
// their exact shapes and counts through kernels::cpu::matmul_*. What is neither attention nor
// matmul (norms, RoPE, SwiGLU, embedding, cross-entropy) is the remainder; the optimizer and
// data are the step minus forward and backward. Rates use process CPU time (the best of a few
// repetitions), as the FMA peak does; wall times stand beside them. Writes one JSON object.
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include "kernels/fma_peak.h"
#include "maxctx/config/config.h"
#include "maxctx/core/rng.h"
#include "maxctx/kernels/cpu/matmul.h"
#include "maxctx/mesh/runtime.h"
#include "maxctx/model/llama.h"
#include "maxctx/model/llama_config.h"
#include "maxctx/model/weights.h"
#include "maxctx/parallel/local_attention.h"
#include "maxctx/train/metrics.h"
#include "train/train_support.h"

namespace {

using nlohmann::json;
namespace bench = maxctx::bench;
namespace model = maxctx::model;
namespace parallel = maxctx::parallel;
using maxctx::TensorView;

struct Options {
  std::string config = std::string(MAXCTX_SOURCE_DIR) + "/configs/base.yml";
  std::string out;
  std::string run_dir = "train_bench_runs";
  std::string model_name = "maxctx-20m";
  int64_t seq = 2048;
  int warmup = 1;
  int steps = 4;
  int breakdown_reps = 3;
};

Options parse(int argc, char** argv) {
  Options o;
  bench::parse_flags(argc, argv, "train_bench",
                     {{"--config", [&](const std::string& v) { o.config = v; }},
                      {"--out", [&](const std::string& v) { o.out = v; }},
                      {"--run-dir", [&](const std::string& v) { o.run_dir = v; }},
                      {"--model", [&](const std::string& v) { o.model_name = v; }},
                      {"--seq", [&](const std::string& v) { o.seq = std::stoll(v); }},
                      {"--warmup", [&](const std::string& v) { o.warmup = std::stoi(v); }},
                      {"--steps", [&](const std::string& v) { o.steps = std::stoi(v); }}});
  return o;
}

struct Timing {
  double cpu = 1e30;   // process CPU seconds of the best repetition
  double wall = 1e30;  // wall seconds of the same repetition
};

Timing best_of(int reps, const std::function<void()>& body) {
  Timing best;
  for (int r = 0; r < reps; ++r) {
    const double cpu_start = bench::process_cpu_seconds();
    const double wall_start = bench::wall_seconds();
    body();
    const double cpu = bench::process_cpu_seconds() - cpu_start;
    if (cpu < best.cpu) best = {cpu, bench::wall_seconds() - wall_start};
  }
  return best;
}

double fma_peak_gflops() {
  constexpr int64_t kIterations = 20'000'000;
  float checksum = 0;
  const Timing took = best_of(5, [&] { checksum += bench::run_fma_chains(kIterations); });
  std::fprintf(stderr, "fma checksum %g\n", static_cast<double>(checksum));
  const double flops =
      2.0 * bench::kFmaChains * static_cast<double>(bench::fma_vector_lanes()) * kIterations;
  return flops / took.cpu / 1e9;
}

// LocalAttention with the CPU time of its calls added up, forward and backward apart.
class TimedAttention final : public parallel::AttentionPlan {
 public:
  void forward(TensorView out, TensorView lse, TensorView q, TensorView k, TensorView v,
               const parallel::TokenLayout& tokens,
               const maxctx::kernels::AttentionParams& dims) override {
    const double start = bench::process_cpu_seconds();
    inner_.forward(out, lse, q, k, v, tokens, dims);
    forward_seconds += bench::process_cpu_seconds() - start;
  }
  void backward(TensorView dq, TensorView dk, TensorView dv, TensorView d_out, TensorView out,
                TensorView lse, TensorView q, TensorView k, TensorView v,
                const parallel::TokenLayout& tokens,
                const maxctx::kernels::AttentionParams& dims) override {
    const double start = bench::process_cpu_seconds();
    inner_.backward(dq, dk, dv, d_out, out, lse, q, k, v, tokens, dims);
    backward_seconds += bench::process_cpu_seconds() - start;
  }
  maxctx::kernels::AttentionStats stats() const override { return inner_.stats(); }

  double forward_seconds = 0;
  double backward_seconds = 0;

 private:
  parallel::LocalAttention inner_{maxctx::kernels::backend(maxctx::Device::kCpu)};
};

// One nn.Linear of the model: out = in · Wᵀ, (N, in) -> (N, out), `count` times per step.
struct Gemm {
  const char* name;
  int64_t in_dim, out_dim, count;
};

std::vector<Gemm> model_gemms(const model::LlamaConfig& c) {
  const int64_t L = c.num_layers;
  return {{"q_proj", c.emb_dim, c.q_dim(), L},    {"k_proj", c.emb_dim, c.kv_dim(), L},
          {"v_proj", c.emb_dim, c.kv_dim(), L},   {"o_proj", c.q_dim(), c.emb_dim, L},
          {"gate_proj", c.emb_dim, c.mlp_dim, L}, {"up_proj", c.emb_dim, c.mlp_dim, L},
          {"down_proj", c.mlp_dim, c.emb_dim, L}, {"lm_head", c.emb_dim, c.vocab_size, 1}};
}

std::vector<float> normal(int64_t n, const char* stream) {
  std::vector<float> x(static_cast<size_t>(n));
  maxctx::rng::fill_normal(x, 7, maxctx::rng::stream_id(stream), 0, 0.0f, 0.02f);
  return x;
}

// The model's matmuls replayed at its shapes: forward alone, and backward (d_in and d_weight).
json gemm_breakdown(const model::LlamaConfig& c, int64_t N, double peak, int reps) {
  const std::vector<Gemm> gemms = model_gemms(c);
  int64_t max_in = 0, max_out = 0;
  for (const Gemm& g : gemms) {
    max_in = std::max(max_in, g.in_dim);
    max_out = std::max(max_out, g.out_dim);
  }
  const auto in = normal(N * max_in, "gemm_in");
  const auto weight = normal(max_in * max_out, "gemm_weight");
  const auto d_out = normal(N * max_out, "gemm_d_out");
  std::vector<float> out(static_cast<size_t>(N * max_out)), d_in(static_cast<size_t>(N * max_in));
  std::vector<float> d_weight(static_cast<size_t>(max_in * max_out));
  json shapes = json::array();
  double forward_total = 0, backward_total = 0, flops_total = 0;
  for (const Gemm& g : gemms) {
    const Timing fwd = best_of(reps, [&] {
      maxctx::kernels::cpu::matmul_forward(out.data(), in.data(), weight.data(), N, g.in_dim,
                                           g.out_dim);
    });
    const Timing bwd = best_of(reps, [&] {
      maxctx::kernels::cpu::matmul_backward(d_in.data(), d_weight.data(), d_out.data(), in.data(),
                                            weight.data(), N, g.in_dim, g.out_dim);
    });
    const double flops = 2.0 * N * g.in_dim * g.out_dim;
    forward_total += fwd.cpu * g.count;
    backward_total += bwd.cpu * g.count;
    flops_total += 3 * flops * g.count;
    shapes.push_back({{"name", g.name},
                      {"N", N},
                      {"in", g.in_dim},
                      {"out", g.out_dim},
                      {"per_step", g.count},
                      {"forward_gflops", flops / fwd.cpu / 1e9},
                      {"backward_gflops", 2 * flops / bwd.cpu / 1e9},
                      {"forward_fraction_of_peak", flops / fwd.cpu / 1e9 / peak},
                      {"backward_fraction_of_peak", 2 * flops / bwd.cpu / 1e9 / peak}});
  }
  return {{"shapes", shapes},
          {"forward_cpu_seconds", forward_total},
          {"backward_cpu_seconds", backward_total},
          {"gflop", flops_total / 1e9},
          {"fraction_of_peak", flops_total / (forward_total + backward_total) / 1e9 / peak}};
}

// Forward alone and forward + backward of the model as the Trainer builds it (same weights
// init, LocalAttention), on one synthetic row; attention's share through TimedAttention.
json step_breakdown(const maxctx::Config& config, double peak, int reps) {
  const model::LlamaConfig c = model::llama_config_from(config);
  const int64_t S = config.max_target_length;
  const auto specs = model::llama_weight_specs(c);
  const int64_t numel = model::total_numel(specs);
  std::vector<float> params(static_cast<size_t>(numel)), grads(static_cast<size_t>(numel));
  model::init_weights(specs, params.data(), static_cast<uint64_t>(config.init_weights_seed));
  const model::LlamaWeights weights = model::bind_weights(specs, params.data());
  const model::LlamaWeights gradients = model::bind_weights(specs, grads.data());
  model::LlamaActivations acts =
      model::allocate_activations(maxctx::kernels::backend(maxctx::Device::kCpu), c, 1, S);

  std::vector<int32_t> tokens(S), targets(S), positions(S), segments(S, 1);
  std::vector<float> loss_weights(S, 1.0f);
  for (int64_t i = 0; i < S; ++i) {
    tokens[i] = static_cast<int32_t>(maxctx::rng::u32_at(3, 1, i) % c.vocab_size);
    targets[i] = static_cast<int32_t>(maxctx::rng::u32_at(3, 2, i) % c.vocab_size);
    positions[i] = static_cast<int32_t>(i);
  }
  const model::TokenBatch batch{
      1, S, tokens.data(), targets.data(), positions.data(), segments.data(), loss_weights.data()};
  TimedAttention attention;
  parallel::NoTensorReduction no_tensor;
  parallel::ModelPlan plan{
      &maxctx::kernels::backend(maxctx::Device::kCpu), &attention, &no_tensor, nullptr, 1, 0};
  const float d_loss = 1.0f / static_cast<float>(S);

  double attention_forward = 1e30, attention_backward = 1e30;
  const Timing forward = best_of(reps, [&] {
    attention.forward_seconds = 0;
    model::llama_forward(c, weights, batch, plan, acts);
    attention_forward = std::min(attention_forward, attention.forward_seconds);
  });
  double backward_best = 1e30, backward_wall = 0;
  const Timing both = best_of(reps, [&] {
    attention.forward_seconds = attention.backward_seconds = 0;
    model::llama_forward(c, weights, batch, plan, acts);
    const double start = bench::process_cpu_seconds();
    const double wall_start = bench::wall_seconds();
    model::llama_backward(c, weights, gradients, batch, plan, acts, d_loss);
    const double took = bench::process_cpu_seconds() - start;
    if (took < backward_best) {
      backward_best = took;
      backward_wall = bench::wall_seconds() - wall_start;
    }
    attention_backward = std::min(attention_backward, attention.backward_seconds);
  });

  const json gemms = gemm_breakdown(c, S, peak, reps);
  const double gemm_forward = gemms["forward_cpu_seconds"];
  const double gemm_backward = gemms["backward_cpu_seconds"];
  // Causal attention's useful FLOPs, as MaxText counts them: forward 2·S²·D·Hq per layer.
  const double attention_forward_flops =
      2.0 * S * S * c.head_dim * c.num_query_heads * c.num_layers;
  return {{"forward_cpu_seconds", forward.cpu},
          {"forward_wall_seconds", forward.wall},
          {"backward_cpu_seconds", backward_best},
          {"backward_wall_seconds", backward_wall},
          {"forward_plus_backward_cpu_seconds", both.cpu},
          {"attention",
           {{"forward_cpu_seconds", attention_forward},
            {"backward_cpu_seconds", attention_backward},
            {"forward_gflops", attention_forward_flops / attention_forward / 1e9},
            {"backward_gflops", 2.5 * attention_forward_flops / attention_backward / 1e9},
            {"fraction_of_peak",
             3.5 * attention_forward_flops / (attention_forward + attention_backward) / 1e9 / peak},
            {"flops_note",
             "useful causal FLOPs: forward 2 S^2 D Hq per layer, backward 2.5x; MaxText's training "
             "count is 3x forward"}}},
          {"matmul_replayed_at_model_shapes", gemms},
          {"other_forward_cpu_seconds", forward.cpu - attention_forward - gemm_forward},
          {"other_backward_cpu_seconds", backward_best - attention_backward - gemm_backward},
          {"other_note",
           "forward (backward) minus the attention plan's time and the replayed matmuls: norms, "
           "RoPE, SwiGLU, embedding, cross-entropy, residual adds"}};
}

}  // namespace

int main(int argc, char** argv) {
  maxctx::MpiRuntime mpi(&argc, &argv);
  const Options o = parse(argc, argv);
  const double load_start = bench::load_average_1min();
  const double peak = fma_peak_gflops();

  const std::vector<std::string> overrides = {"model_name=" + o.model_name,
                                              "max_target_length=" + std::to_string(o.seq),
                                              "per_device_batch_size=1",
                                              "steps=" + std::to_string(o.warmup + o.steps),
                                              "ici_fsdp_parallelism=1",
                                              "enable_checkpointing=false",
                                              "log_period=1000",
                                              "base_output_directory=" + o.run_dir,
                                              "run_name=train_bench"};
  const maxctx::Config config = maxctx::load_config(o.config, overrides, 1);
  const maxctx::Mesh mesh{maxctx::MeshSpec{}};
  maxctx::train::Trainer trainer(config, mesh, maxctx::kernels::backend(maxctx::Device::kCpu));
  const bench::StepTimes times = bench::time_training_steps(trainer, mesh, o.warmup, o.steps);
  const double step_peak_rss = bench::peak_rss_bytes();

  const maxctx::TrainingTflops tflops = maxctx::training_tflops_per_device(
      maxctx::flops_model(config), config.per_device_batch_size, config.max_target_length);
  const double best_cpu = *std::min_element(times.cpu.begin(), times.cpu.end());
  const double best_wall = *std::min_element(times.wall.begin(), times.wall.end());
  const double tflops_per_s_cpu = tflops.total / best_cpu;
  const double tflops_per_s_wall = tflops.total / best_wall;
  const double fraction = tflops_per_s_cpu * 1e3 / peak;
  const model::LlamaConfig model_config = model::llama_config_from(config);

  json breakdown = step_breakdown(config, peak, o.breakdown_reps);
  breakdown["optimizer_data_other_cpu_seconds"] =
      best_cpu - breakdown["forward_plus_backward_cpu_seconds"].get<double>();
  breakdown["optimizer_note"] =
      "best step CPU time minus the best forward + backward: data, grad norm, clipping, AdamW";

  json out = {{"model_name", o.model_name},
              {"parameters", model_config.num_parameters()},
              {"seq", o.seq},
              {"per_device_batch_size", config.per_device_batch_size},
              {"ranks", 1},
              {"threads", 1},
              {"warmup_steps", o.warmup},
              {"timed_steps", o.steps},
              {"step_wall_seconds", bench::time_summary(times.wall)},
              {"step_cpu_seconds", bench::time_summary(times.cpu)},
              {"tflops_per_step",
               {{"total", tflops.total},
                {"learnable_weight", tflops.learnable_weight},
                {"attention", tflops.attention},
                {"source", "train/metrics.h training_tflops_per_device (MaxText's count)"}}},
              {"tflops_per_second_per_device", tflops_per_s_cpu},
              {"tflops_per_second_per_device_wall", tflops_per_s_wall},
              {"fma_peak_gflops", peak},
              {"fma_target", bench::fma_target_name()},
              {"fraction_of_peak", fraction},
              {"fraction_of_peak_wall", tflops_per_s_wall * 1e3 / peak},
              {"target_fraction", 0.40},
              {"meets_target", fraction >= 0.40},
              {"rate_note",
               "rates use the best step's process CPU time (the FMA peak is measured the "
               "same way); *_wall use its wall time"},
              {"peak_rss_bytes_after_steps", step_peak_rss},
              {"peak_rss_gib_after_steps", step_peak_rss / (1 << 30)},
              {"breakdown", breakdown},
              {"load_average_1min_at_start", load_start},
              {"load_average_1min_at_end", bench::load_average_1min()}};
  const std::string text = out.dump(2);
  if (o.out.empty()) {
    std::printf("%s\n", text.c_str());
  } else {
    std::ofstream(o.out) << text << "\n";
  }
  return 0;
}

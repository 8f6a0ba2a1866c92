// TFLOPs as MaxText counts them (by hand for a small model), the step line, the JSONL file and
// the progress line.
#include "maxctx/train/metrics.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "maxctx/config/config.h"
#include "maxctx/core/check.h"

namespace maxctx {
namespace {

// E 64, Hq 4, Hkv 2, D 16, mlp 128, L 2, V 256 (dense).
FlopsModel small_model() {
  FlopsModel model;
  model.emb_dim = 64;
  model.num_query_heads = 4;
  model.num_kv_heads = 2;
  model.head_dim = 16;
  model.mlp_dim = 128;
  model.num_layers = 2;
  model.vocab_size = 256;
  model.num_mlp_activations = 2;
  return model;
}

TEST(Tflops, SmallModelByHand) {
  // E 64, Hq 4, Hkv 2, D 16, mlp 128, L 2, V 256, B = 0.5 (fractional under CP), S 32, GA 2.
  //   ffn  = 2·0.5·32·128·64·2 + 2·0.5·32·128·64 = 524288 + 262144 = 786432
  //   qkv  = 2·0.5·32·64·(4 + 2·2)·16 = 262144;  proj = 2·0.5·32·64·4·16 = 131072
  //   attn = 4·0.5·32²·4·16 / 2 = 65536;          embed = 2·0.5·32·64·256 = 524288
  //   learnable = ((786432 + 262144 + 131072)·2 + 524288)·3·2 / 1e12 = 1.7301504e-5
  //   attention = 65536·2·3·2 / 1e12 = 7.86432e-7
  const FlopsModel model = small_model();
  const TrainingTflops tflops = training_tflops_per_device(model, 0.5, 32, 2);
  EXPECT_NEAR(tflops.learnable_weight, 1.7301504e-5, 1e-18);
  EXPECT_NEAR(tflops.attention, 7.86432e-7, 1e-19);
  EXPECT_DOUBLE_EQ(tflops.total, tflops.learnable_weight + tflops.attention);
  EXPECT_DOUBLE_EQ(training_tokens_per_device(0.5, 32, 2), 32.0);
}

// A mixture of experts (MaxText's calculate_routed_and_shared_ffn_tflops_per_device): the ffn
// of num_experts_per_tok experts plus the router's 2·B·S·E·X. The model above with 4 experts, 2
// per token: per layer ffn 786432 -> 2·786432 + 2·16·64·4 = 1581056, so learnable grows by
// 794624·2 layers·3·2 accumulation / 1e12 = 9.535488e-6.
TEST(Tflops, MixtureOfExpertsCountsActiveExpertsAndRouter) {
  FlopsModel model = small_model();
  model.num_experts = 4;
  model.num_experts_per_tok = 2;
  const TrainingTflops tflops = training_tflops_per_device(model, 0.5, 32, 2);
  EXPECT_NEAR(tflops.learnable_weight, 1.7301504e-5 + 9.535488e-6, 1e-18);
  EXPECT_NEAR(tflops.attention, 7.86432e-7, 1e-19);
}

TEST(Tflops, ModelDimsComeFromTheDerivedConfig) {
  Config config;
  config.derived.emb_dim = 4096;
  config.derived.num_query_heads = 32;
  config.derived.num_kv_heads = 8;
  config.derived.mlp_dim = 14336;
  config.derived.num_decoder_layers = 32;
  config.head_dim = 128;
  config.vocab_size = 128256;
  const FlopsModel model = flops_model(config);
  EXPECT_EQ(model.emb_dim, 4096);
  EXPECT_EQ(model.num_kv_heads, 8);
  EXPECT_EQ(model.num_layers, 32);
  EXPECT_EQ(model.num_mlp_activations, 2);
  // Llama 3.1 8B at S = 8192, B = 1: ~6·8e9·8192 ≈ 4e2 learnable TFLOPs, plus attention.
  const TrainingTflops tflops = training_tflops_per_device(model, 1.0, 8192);
  EXPECT_GT(tflops.learnable_weight, 350.0);
  EXPECT_LT(tflops.learnable_weight, 450.0);
  EXPECT_NEAR(tflops.attention, 4.0 * 8192.0 * 8192 * 32 * 128 / 2 * 32 * 3 / 1e12, 1e-9);
}

StepMetrics example_step() {
  StepMetrics m;
  m.step = 7;
  m.seconds = 2.0;
  m.loss = 3.14159;
  m.total_weights = 4096;
  m.learning_rate = 2.5e-4;
  m.grad_norm = 1.0;
  m.raw_grad_norm = 4.5;
  m.extra = {{"learning/recall_accuracy", 0.25}};
  return m;
}

TEST(MetricLine, IsMaxTextsLine) {
  EXPECT_EQ(format_step_line(example_step(), 10.0, 8192.0),
            "completed step: 7, seconds: 2.000, TFLOP/s/device: 5.000, Tokens/s/device: "
            "4096.000, total_weights: 4096, loss: 3.142");
}

TEST(MetricLine, ProgressShowsStepsAndEta) {
  EXPECT_EQ(format_progress(12, 100, 1.5), "step 12/100 [12.0%] 1.500 s/step, ETA 2m12s");
  EXPECT_EQ(format_progress(1, 10001, 1.0), "step 1/10001 [0.0%] 1.000 s/step, ETA 2h46m");
  EXPECT_EQ(format_progress(100, 100, 1.0), "step 100/100 [100.0%] 1.000 s/step, ETA 0m00s");
}

std::vector<nlohmann::json> read_jsonl(const std::string& path) {
  std::ifstream file(path);
  std::vector<nlohmann::json> lines;
  for (std::string line; std::getline(file, line);) lines.push_back(nlohmann::json::parse(line));
  return lines;
}

TEST(MetricLogger, AppendsOneJsonObjectPerStep) {
  const std::string path =
      testing::TempDir() + "maxctx_metrics_test_" + std::to_string(::getpid()) + ".jsonl";
  MetricLoggerOptions options;
  options.jsonl_path = path;
  options.run_name = "unit";
  options.total_steps = 10;
  options.tflops_per_device = 10.0;
  options.tokens_per_device = 8192.0;
  {
    MetricLogger logger(options);
    StepMetrics step = example_step();
    logger.log_step(step);
    step.step = 8;
    step.seconds = 4.0;
    step.extra.clear();
    logger.log_step(step);
  }
  std::vector<nlohmann::json> lines = read_jsonl(path);
  ASSERT_EQ(lines.size(), 2u);
  const nlohmann::json& first = lines[0];
  EXPECT_EQ(first["step"], 7);
  EXPECT_EQ(first["run_name"], "unit");
  EXPECT_DOUBLE_EQ(first["learning/loss"].get<double>(), 3.14159);
  EXPECT_EQ(first["learning/total_weights"], 4096);
  EXPECT_DOUBLE_EQ(first["learning/grad_norm"].get<double>(), 1.0);
  EXPECT_DOUBLE_EQ(first["learning/raw_grad_norm"].get<double>(), 4.5);
  EXPECT_DOUBLE_EQ(first["learning/current_learning_rate"].get<double>(), 2.5e-4);
  EXPECT_DOUBLE_EQ(first["perf/step_time_seconds"].get<double>(), 2.0);
  EXPECT_DOUBLE_EQ(first["perf/per_device_tflops"].get<double>(), 10.0);
  EXPECT_DOUBLE_EQ(first["perf/per_device_tflops_per_sec"].get<double>(), 5.0);
  EXPECT_DOUBLE_EQ(first["perf/per_device_tokens"].get<double>(), 8192.0);
  EXPECT_DOUBLE_EQ(first["perf/per_device_tokens_per_sec"].get<double>(), 4096.0);
  EXPECT_DOUBLE_EQ(first["learning/recall_accuracy"].get<double>(), 0.25);
  EXPECT_EQ(lines[1]["step"], 8);
  EXPECT_DOUBLE_EQ(lines[1]["perf/per_device_tokens_per_sec"].get<double>(), 2048.0);
  EXPECT_FALSE(lines[1].contains("learning/recall_accuracy"));

  // A run resumed after 8 steps keeps the rows of the steps before (7) and drops those from 8 on
  // (logged by a run that went past its checkpoint), then appends; a fresh run starts over.
  options.resumed_at_step = 8;
  { MetricLogger(options).log_step(example_step()); }
  lines = read_jsonl(path);
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_EQ(lines[0]["step"], 7);
  EXPECT_EQ(lines[1]["step"], 7);
  options.resumed_at_step = -1;
  { MetricLogger(options).log_step(example_step()); }
  EXPECT_EQ(read_jsonl(path).size(), 1u);
  std::remove(path.c_str());
}

TEST(MetricLogger, UnwritableFileIsAnError) {
  MetricLoggerOptions options;
  options.jsonl_path = "/nonexistent-dir/metrics.jsonl";
  EXPECT_THROW(MetricLogger logger(options), Error);
}

}  // namespace
}  // namespace maxctx

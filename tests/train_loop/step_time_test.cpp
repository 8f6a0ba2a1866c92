// The plan's step time (plan/step_work.h, plan/hardware_profile.h): the measured tables load
// and interpolate, every matmul of the step is in the work list (its forward FLOPs equal
// MaxText's weight count), and a profile without tables gives the peak-rate roofline.
#include <gtest/gtest.h>

#include <fstream>

#include "maxctx/plan/hardware_profile.h"
#include "maxctx/plan/step_plan.h"
#include "train_support.h"

namespace maxctx::train {
namespace {

const char* kProfile = R"(name: table-test
memory_bytes: 1e10
memory_bandwidth: 1e10
flops: {float32: 100e9, bfloat16: 400e9, int8: 800e9}
ici: {bandwidth: 1e9, latency: 1e-6}
dcn: {bandwidth: 1e9, latency: 1e-6}
cache_bytes: 3.2e7
matmul_by_size:
  float32: {128: 50e9, 512: 90e9}
attention_by_head_dim:
  float32: {64: 30e9}
vector_rates:
  rmsnorm: 1e9
)";

plan::HardwareProfile write_and_load(const std::string& dir, const std::string& text) {
  const std::string path = dir + "/profile.yml";
  std::ofstream(path) << text;
  return plan::load_hardware_profile(path, "");
}

TEST(HardwareProfileTables, InterpolateInLogSizeAndHoldFlatBeyondTheEnds) {
  testing::SharedTempDir dir;
  const plan::HardwareProfile p = write_and_load(dir.path(), kProfile);
  EXPECT_DOUBLE_EQ(p.matmul_rate("float32", 64), 50e9);  // below the table
  EXPECT_DOUBLE_EQ(p.matmul_rate("float32", 128), 50e9);
  EXPECT_DOUBLE_EQ(p.matmul_rate("float32", 256), 70e9);    // halfway in log2
  EXPECT_DOUBLE_EQ(p.matmul_rate("float32", 4096), 90e9);   // above it
  EXPECT_DOUBLE_EQ(p.matmul_rate("bfloat16", 256), 400e9);  // no table: the peak
  EXPECT_DOUBLE_EQ(p.matmul_rate("bfloat16_backward", 256), 400e9);
  EXPECT_DOUBLE_EQ(p.attention_rate("float32", 128), 30e9);
  EXPECT_DOUBLE_EQ(p.vector_seconds("rmsnorm", 2e9, 20), 2.0);
  EXPECT_DOUBLE_EQ(p.vector_seconds("swiglu", 1e9, 30), 3.0);  // unmeasured: bytes / bandwidth
  // What probe-hardware writes loads back to the same tables.
  const plan::HardwareProfile again = write_and_load(dir.path(), plan::format_hardware_profile(p));
  EXPECT_EQ(again.matmul_by_size, p.matmul_by_size);
  EXPECT_EQ(again.attention_by_head_dim, p.attention_by_head_dim);
  EXPECT_EQ(again.vector_rates, p.vector_rates);
  EXPECT_DOUBLE_EQ(again.cache_bytes, 3.2e7);
}

TEST(HardwareProfileTables, BadTablesAreOneError) {
  testing::SharedTempDir dir;
  for (const std::string bad :
       {"matmul_by_size: {float32: {0: 1e9}}\n", "matmul_by_size: {float32: {big: 1e9}}\n",
        "matmul_by_size: {float32: {128: -1}}\n", "vector_rates: {rmsnorm: fast}\n"}) {
    std::string text = kProfile;
    text = text.substr(0, text.find("matmul_by_size")) + bad;
    EXPECT_THROW(write_and_load(dir.path(), text), Error) << bad;
  }
}

TEST(StepWork, ForwardMatmulFlopsEqualMaxTextsWeightCount) {
  testing::SharedTempDir dir;
  for (const std::string model : {"model_name=maxctx-tiny", "model_name=mixtral-tiny"}) {
    std::vector<std::string> keys =
        testing::with_overrides(testing::tiny_training_overrides(dir.path(), "step_work"),
                                {model, "per_device_batch_size=2", "max_target_length=64",
                                 "remat_policy=none", "sparse_matmul=true"});
    const Config config = load_config(testing::kBaseConfig, keys, 1);
    const plan::TrainingPlan plan = plan::plan_training(config);
    double forward = 0, backward = 0;
    for (const plan::MatmulWork& mm : plan.work.matmuls) {
      forward += mm.forward_flops();
      backward += mm.backward_flops();
    }
    EXPECT_NEAR(forward * 3 / 1e12, plan.model_tflops.learnable_weight,
                1e-9 * plan.model_tflops.learnable_weight)
        << model;
    EXPECT_DOUBLE_EQ(backward, 2 * forward) << model;
  }
}

TEST(StepWork, RecomputationAddsTheProjectionsItDoesNotSave) {
  // remat_policy=full on a dense model saves nothing: q, k, v, o, gate and up run twice
  // (2 FLOPs per multiply-add, per token and layer), and attention's forward once more.
  testing::SharedTempDir dir;
  const auto plan_with = [&](const std::string& policy) {
    std::vector<std::string> keys = testing::with_overrides(
        testing::tiny_training_overrides(dir.path(), "step_work"),
        {"per_device_batch_size=2", "max_target_length=64", "remat_policy=" + policy});
    const Config config = load_config(testing::kBaseConfig, keys, 1);
    return std::pair{config, plan::plan_training(config)};
  };
  const auto [config, full] = plan_with("full");
  const plan::TrainingPlan none = plan_with("none").second;
  const double t = 2 * 64, E = double(config.derived.emb_dim),
               L = config.derived.num_decoder_layers;
  const double D = double(config.head_dim), F = double(config.derived.mlp_dim);
  const double q = config.derived.num_query_heads * D, kv = config.derived.num_kv_heads * D;
  const double projections = 2 * t * E * (q + 2 * kv) + 2 * t * E * q + 2 * t * E * F * 2;
  EXPECT_NEAR(full.executed_tflops.learnable_weight - full.model_tflops.learnable_weight,
              projections * L / 1e12, 1e-9 * full.model_tflops.learnable_weight);
  EXPECT_NEAR(full.executed_tflops.attention - full.model_tflops.attention,
              4 * t * 64 * q / 2 * L / 1e12, 1e-9 * full.model_tflops.attention);
  EXPECT_EQ(none.executed_tflops.total, none.model_tflops.total);
}

TEST(StepPlan, StateIsShardedOverFsdpTimesContextAndReplicatedOverData) {
  // MaxText's rules shard a weight's model dimension over fsdp and context: on 4 ranks, fsdp 4,
  // context 4 and fsdp 2 x context 2 each hold a quarter of the weights, moments and gradients;
  // data 4 holds all of them.
  testing::SharedTempDir dir;
  const auto state_bytes = [&](const std::vector<std::string>& mesh) {
    std::vector<std::string> keys = testing::with_overrides(
        testing::tiny_training_overrides(dir.path(), "step_plan"),
        {"per_device_batch_size=1", "max_target_length=64", "ici_fsdp_parallelism=1"});
    keys = testing::with_overrides(keys, mesh);
    const plan::TrainingMemory m =
        plan::plan_training(load_config(testing::kBaseConfig, keys, 4)).memory;
    return m.parameters + m.optimizer + m.gradients;
  };
  const int64_t replicated = state_bytes({"ici_data_parallelism=4"});
  const int64_t fsdp = state_bytes({"ici_fsdp_parallelism=4"});
  EXPECT_NEAR(double(fsdp), replicated / 4.0, 0.001 * replicated);
  EXPECT_EQ(state_bytes({"ici_context_parallelism=4"}), fsdp);
  EXPECT_EQ(state_bytes({"ici_fsdp_parallelism=2", "ici_context_parallelism=2"}), fsdp);
}

TEST(StepWork, ListsEveryVectorKernelTheProbeMeasures) {
  testing::SharedTempDir dir;
  const std::vector<std::string> keys = testing::tiny_training_overrides(dir.path(), "step_work");
  const plan::TrainingPlan plan = plan::plan_training(load_config(testing::kBaseConfig, keys, 1));
  std::vector<std::string> ops;
  for (const plan::VectorWork& v : plan.work.vectors) ops.push_back(v.op);
  EXPECT_EQ(ops, plan::training_vector_ops());
}

}  // namespace
}  // namespace maxctx::train

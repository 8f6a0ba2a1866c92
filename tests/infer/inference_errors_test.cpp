// The inference errors: each a maxctx::Error on every rank alike (no rank left in a collective)
// with one line naming what was wrong and what is allowed. Also the shipped
// configs/inference.yml resolving to its documented settings.
#include <gtest/gtest.h>

#include <string>

#include "infer/infer_test_util.h"
#include "maxctx/config/config.h"

namespace maxctx::infer {
namespace {

using testing::ca_mesh;
using testing::error_of;
using testing::mesh_of;

InferenceSettings small_settings() {
  InferenceSettings s;
  s.max_prefill_length = 12;
  s.max_target_length = 16;
  s.slots = 2;
  return s;
}

class InferenceErrors : public ::testing::Test {
 protected:
  model::LlamaConfig mc = testing::tiny_config();
  std::vector<float> weights = testing::init_weights(mc, 1);
  Mesh mesh = ca_mesh(Communicator::world());
  int ca = static_cast<int>(mesh.axis_size(Axis::kContextAutoregressive));
};

TEST_F(InferenceErrors, PromptLongerThanMaxPrefill) {
  InferenceEngine engine(maxctx::kernels::backend(maxctx::Device::kCpu), small_settings(), mc,
                         weights, mesh);
  const std::string e = error_of([&] { engine.prefill({std::vector<int32_t>(13, 1), {1}}); });
  EXPECT_NE(e.find("prompt 0 has 13 tokens, more than max_prefill_predict_length = 12"),
            std::string::npos)
      << e;
}

TEST_F(InferenceErrors, PromptCountEmptyPromptAndBadId) {
  InferenceEngine engine(maxctx::kernels::backend(maxctx::Device::kCpu), small_settings(), mc,
                         weights, mesh);
  EXPECT_NE(error_of([&] { engine.prefill({{1}}); }).find("1 prompts for 2 decode slots"),
            std::string::npos);
  EXPECT_NE(error_of([&] {
              engine.prefill({{1}, {}});
            }).find("prompt 1 is empty"),
            std::string::npos);
  EXPECT_NE(error_of([&] {
              engine.prefill({{1}, {256}});
            }).find("allowed 0..255"),
            std::string::npos);
}

TEST_F(InferenceErrors, DecodingPastMaxTargetLength) {
  InferenceEngine engine(maxctx::kernels::backend(maxctx::Device::kCpu), small_settings(), mc,
                         weights, mesh);
  engine.prefill({std::vector<int32_t>(12, 3), {5}});
  const std::vector<int32_t> tokens = {1, 1};
  const std::vector<uint8_t> active = {1, 1};
  // Slot 0 holds 12 tokens: positions 12, 13 and 14 still leave a sequence of <= 16 tokens.
  for (int step = 0; step < 3; ++step) engine.decode_step(tokens, active);
  const std::string e = error_of([&] { engine.decode_step(tokens, active); });
  EXPECT_NE(e.find("slot 0: a token at position 16 would make the sequence longer than "
                   "max_target_length = 16"),
            std::string::npos)
      << e;
  // A finished slot may stay in the batch.
  EXPECT_EQ(error_of([&] { engine.decode_step(tokens, std::vector<uint8_t>{0, 1}); }), "");
}

TEST_F(InferenceErrors, MaxTargetNotBeyondMaxPrefill) {
  InferenceSettings s = small_settings();
  s.max_target_length = 12;
  EXPECT_NE(error_of([&] {
              InferenceEngine(maxctx::kernels::backend(maxctx::Device::kCpu), s, mc, weights, mesh);
            }).find("max_target_length = 12 must exceed max_prefill_predict_length = 12"),
            std::string::npos);
}

TEST_F(InferenceErrors, AxisMustDividePrefillAndBatchSlots) {
  if (ca == 1) GTEST_SKIP() << "every length divides over one rank";
  InferenceSettings s = small_settings();
  s.max_prefill_length = ca + 1;
  s.max_target_length = 4 * ca;
  const std::string e = error_of([&] {
    InferenceEngine(maxctx::kernels::backend(maxctx::Device::kCpu), s, mc, weights, mesh);
  });
  EXPECT_NE(e.find(fmt::format("max_prefill_predict_length = {} does not split over "
                               "context_autoregressive = {}",
                               ca + 1, ca)),
            std::string::npos)
      << e;
  // The dual chunk swap cuts the prompt into 2·ca chunks; 3·ca tokens split only without it.
  s.max_prefill_length = 3 * ca;
  const std::string e_lb = error_of([&] {
    InferenceEngine(maxctx::kernels::backend(maxctx::Device::kCpu), s, mc, weights, mesh);
  });
  EXPECT_NE(e_lb.find(fmt::format("max_prefill_predict_length = {} does not split over "
                                  "context_autoregressive = {} with context_parallel_load_balance "
                                  "(2·ca chunks): make it a multiple of {}",
                                  3 * ca, ca, 2 * ca)),
            std::string::npos)
      << e_lb;
  s.load_balance = false;
  EXPECT_EQ(error_of([&] {
              InferenceEngine(maxctx::kernels::backend(maxctx::Device::kCpu), s, mc, weights, mesh);
            }),
            "");
  InferenceSettings b = small_settings();
  b.max_prefill_length = 12 * ca;
  b.max_target_length = 13 * ca;
  b.decode = DecodeSharding::kBatch;
  b.slots = ca + 1;
  const std::string eb = error_of([&] {
    InferenceEngine(maxctx::kernels::backend(maxctx::Device::kCpu), b, mc, weights, mesh);
  });
  EXPECT_NE(eb.find("context_autoregressive_decode=batch splits the"), std::string::npos) << eb;
  b.decode = DecodeSharding::kSequence;
  EXPECT_EQ(error_of([&] {
              InferenceEngine(maxctx::kernels::backend(maxctx::Device::kCpu), b, mc, weights, mesh);
            }),
            "");
}

Config inference_config(const std::vector<std::string>& overrides) {
  return load_config(MAXCTX_SOURCE_DIR "/configs/inference.yml", overrides,
                     Communicator::world().size());
}

TEST(InferenceConfig, ShippedConfigResolves) {
  const Config c = inference_config({"model_name=maxctx-tiny"});
  const Mesh mesh = mesh_of(c);
  const int world = Communicator::world().size();
  EXPECT_EQ(mesh.axis_size(Axis::kContextAutoregressive), world);
  if (64 % world != 0)
    GTEST_SKIP() << "max_prefill_predict_length 64 does not split over " << world;
  const InferenceSettings s = inference_settings_from(c, mesh);
  EXPECT_EQ(s.max_prefill_length, 64);
  EXPECT_EQ(s.max_target_length, 128);
  EXPECT_EQ(s.decode, DecodeSharding::kSequence);
  EXPECT_EQ(s.slots, world);  // per_device_batch_size 1 x devices
  EXPECT_FALSE(s.int8_weights);
  EXPECT_FALSE(s.quantize_kvcache);
}

TEST(InferenceConfig, ContextAxisIsAnErrorNamingContextAutoregressive) {
  const int world = Communicator::world().size();
  if (world == 1) GTEST_SKIP() << "needs context > 1";
  const Config c =
      inference_config({"ici_context_parallelism=-1", "ici_context_autoregressive_parallelism=1"});
  const Mesh mesh = mesh_of(c);
  const std::string e = error_of([&] { inference_settings_from(c, mesh); });
  EXPECT_NE(e.find(fmt::format("context = {} is the training axis; inference shards the prompt "
                               "and the KV cache over context_autoregressive",
                               world)),
            std::string::npos)
      << e;
}

TEST(InferenceConfig, OtherAxesAndFractionalBatchAreErrors) {
  const int world = Communicator::world().size();
  if (world > 1) {
    const Config c =
        inference_config({"ici_tensor_parallelism=-1", "ici_context_autoregressive_parallelism=1"});
    const Mesh mesh = mesh_of(c);
    EXPECT_NE(error_of([&] {
                inference_settings_from(c, mesh);
              }).find("inference shards only over context_autoregressive"),
              std::string::npos);
    // The expert axis is an inference axis (MaxText's decode batch and experts): accepted, each
    // rank one expert group of one slot (expert_axis_test runs it).
    const Config expert =
        inference_config({"ici_expert_parallelism=-1", "ici_context_autoregressive_parallelism=1"});
    const Mesh expert_mesh = mesh_of(expert);
    EXPECT_EQ(expert_mesh.axis_size(Axis::kExpert), world);
    EXPECT_EQ(inference_settings_from(expert, expert_mesh).slots, world);
  }
  // The config layer already refuses a fractional global batch; inference names it too.
  const std::string e = error_of([&] {
    const Config half = inference_config({"per_device_batch_size=0.5"});
    inference_settings_from(half, mesh_of(half));
  });
  if (world % 2 == 1) {
    EXPECT_NE(e.find("the global batch must be a whole number"), std::string::npos) << e;
  }
}

}  // namespace
}  // namespace maxctx::infer

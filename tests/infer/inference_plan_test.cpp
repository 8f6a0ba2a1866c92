// `maxctx plan` for inference against the engine (issue #20): the plan's KV cache bytes equal
// what the engine's cache allocated, its weight bytes the loaded weights', and the bytes it says
// a decode step streams equal the engine's own count (InferenceWeights::bytes_per_step with the
// row split and the expert split the engine built), for fp32, int8 weights with an int8 cache,
// batch-sharded decode and an int8 Mixtral (its experts split over ca), on 1 and 2 ranks.
#include "maxctx/plan/inference_plan.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "infer/infer_test_util.h"
#include "maxctx/config/config.h"
#include "maxctx/infer/engine.h"
#include "maxctx/infer/model_source.h"
#include "maxctx/model/inference.h"
#include "maxctx/model/memory_estimate.h"

namespace maxctx::infer {
namespace {

using testing::mesh_of;

struct PlanCase {
  std::string name;
  std::vector<std::string> keys;
};

void PrintTo(const PlanCase& c, std::ostream* os) { *os << c.name; }

class InferencePlanMatchesEngine : public ::testing::TestWithParam<PlanCase> {};

TEST_P(InferencePlanMatchesEngine, CacheWeightsAndStepBytes) {
  std::vector<std::string> keys = {"per_device_batch_size=2"};
  keys.insert(keys.end(), GetParam().keys.begin(), GetParam().keys.end());
  if (std::none_of(keys.begin(), keys.end(),
                   [](const std::string& k) { return k.starts_with("model_name="); })) {
    keys.push_back("model_name=maxctx-tiny");
  }
  const Config config =
      load_config(MAXCTX_SOURCE_DIR "/configs/inference.yml", keys, Communicator::world().size());
  const plan::InferencePlan plan = plan::plan_inference(config);
  const Mesh mesh = mesh_of(config);
  const kernels::Kernels& k = kernels::backend(Device::kCpu);
  InferenceModel model = load_inference_model(config, k, mesh);
  const int64_t weight_bytes = static_cast<int64_t>(model.weights.view().bytes());
  InferenceEngine engine(k, inference_settings_from(config, mesh), model.config,
                         std::move(model.weights), mesh, std::move(model.int8));
  EXPECT_EQ(plan.kv_cache_bytes, engine.cache().bytes());
  EXPECT_EQ(plan.weight_bytes, weight_bytes);
  EXPECT_EQ(plan.int8_copy_bytes, engine.weights().int8_copy_bytes());
  EXPECT_EQ(plan.decode_step_bytes, engine.weights().bytes_per_step(engine.decode_row_split()));
  // Issue #31: what a rank holds is the plan's weights (int8: no float copy of a projection),
  // and on rank 0 (the largest share of every split) the memory check's count.
  EXPECT_EQ(plan.weight_bytes + plan.int8_copy_bytes, engine.resident_weight_bytes());
  if (Communicator::world().rank() == 0) {
    EXPECT_EQ(model::inference_weight_bytes(engine.model_config(), engine.expert_ranks(),
                                            engine.settings().int8_weights, engine.ca()),
              static_cast<double>(engine.resident_weight_bytes()));
  }
  // The prefill attention's staging after a prefill of max_prefill_predict_length tokens (one
  // token pass or more of equal size, where chunked).
  const auto prompts = testing::make_prompts(engine.slots(), engine.settings().max_prefill_length,
                                             engine.model_config().vocab_size, 3);
  engine.prefill(std::vector<std::vector<int32_t>>(prompts.size(), prompts[0]));
  EXPECT_EQ(plan.prefill_staging_bytes, engine.prefill_staging_held());
  EXPECT_EQ(plan.workspace_bytes - (plan.settings.slots + plan.group_slots()) *
                                       plan.model.vocab_size * int64_t{sizeof(float)},
            model::inference_workspace_bytes(
                engine.model_config(),
                InferenceEngine::workspace_rows(engine.settings(), engine.ca(), engine.expert()),
                engine.expert_ranks()));
}

// use_chunked_prefill: the workspace holds one pass: a chunk of 16 tokens per rank, less than a
// prompt's share (64 / ca), so each prompt is prefilled in chunks of tokens.
TEST(InferencePlanChunkedPrefill, WorkspaceHoldsOnePass) {
  const auto plan_of = [](std::vector<std::string> keys) {
    keys.insert(keys.end(), {"per_device_batch_size=4", "model_name=maxctx-tiny"});
    return plan::plan_inference(load_config(MAXCTX_SOURCE_DIR "/configs/inference.yml", keys,
                                            Communicator::world().size()));
  };
  const plan::InferencePlan whole = plan_of({"use_chunked_prefill=false"});
  const plan::InferencePlan chunked =
      plan_of({"use_chunked_prefill=true", "prefill_chunk_size=16"});
  const int64_t share = whole.settings.max_prefill_length / whole.ca;
  EXPECT_EQ(InferenceEngine::workspace_rows(whole.settings, whole.ca),
            whole.settings.slots * share);
  EXPECT_GT(share, 16);
  EXPECT_EQ(InferenceEngine::workspace_rows(chunked.settings, chunked.ca), 16);
  EXPECT_LT(chunked.workspace_bytes, whole.workspace_bytes);
}

INSTANTIATE_TEST_SUITE_P(
    Cases, InferencePlanMatchesEngine,
    ::testing::Values(
        PlanCase{"fp32", {}}, PlanCase{"int8", {"quantization=int8", "quantize_kvcache=true"}},
        PlanCase{
            "bf16_batch",
            {"dtype=bfloat16", "weight_dtype=bfloat16", "context_autoregressive_decode=batch"}},
        // Experts split over ca on 2 ranks (4 experts).
        PlanCase{"mixtral_int8", {"model_name=mixtral-tiny", "quantization=int8"}},
        PlanCase{"int8_chunked",
                 {"quantization=int8", "use_chunked_prefill=true", "prefill_chunk_size=16"}},
        // Whole slots per pass: two 16-token prompts' shares fit a chunk of 32 (one rank) or
        // 16 tokens per rank (two).
        PlanCase{"slots_chunked",
                 {"max_prefill_predict_length=16", "max_target_length=24",
                  "use_chunked_prefill=true", "prefill_chunk_size=16"}},
        // A prompt in token chunks reading an int8 cache's earlier rows.
        PlanCase{"int8_kv_token_chunks",
                 {"quantize_kvcache=true", "use_chunked_prefill=true", "prefill_chunk_size=8"}}),
    [](const auto& test) { return test.param.name; });

}  // namespace
}  // namespace maxctx::infer

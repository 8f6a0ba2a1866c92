// Inference on the mesh {expert = 2, context_autoregressive = ranks / 2} (ctest: 2 and 4 ranks:
// E = 2, and E = 2 × C = 2) against the single-device run of the same engine. The expert axis
// splits the decode slots into two groups (each runs its slots over its ca ranks as without
// it) and a mixture of experts' experts over all E·C ranks (rows exchanged by all_to_all):
//  - every slot draws the same tokens and every step's logits (the prefill's and each decode
//    step's) agree within 1e-5 norm-relative (fp32) for the tiny_mixtral fixture with sparse
//    and dense dispatch, both decode shardings, a dense model (a pure slot split) and a Mixtral
//    of 3 experts (not split over 2 or 4 ranks: every rank runs them all); with int8
//    weights and an int8 KV cache, fed the one-rank run's tokens, within 5e-2 (inference_test's
//    int8 bound);
//  - each rank holds exactly its own experts (resident bytes = the one-rank engine's less the
//    other ranks' experts), fp32 and int8;
//  - the plan (`maxctx plan`) and the early memory check count the same weights as the loader,
//    per rank, and the plan's KV cache and step bytes equal the engine's;
//  - slots that do not split over expert (or a group's over ca, for batch decode), and a dense
//    dispatch capacity of 0, are one clear error on every rank.
#include <gtest/gtest.h>

#include <string>

#include "infer/infer_test_util.h"
#include "maxctx/config/config.h"
#include "maxctx/infer/model_source.h"
#include "maxctx/model/memory_estimate.h"
#include "maxctx/parallel/weight_sharding.h"
#include "maxctx/plan/inference_plan.h"

namespace maxctx::infer {
namespace {

using testing::error_of;
using testing::other_experts_bytes;
using testing::relative_error;

constexpr int64_t kSlots = 4;  // two groups of 2: batch decode splits a group over ca = 2
constexpr int64_t kPrefill = 16;
constexpr int64_t kTarget = 24;

const kernels::Kernels& cpu() { return kernels::backend(Device::kCpu); }

// expert = 2, context_autoregressive = the rest of `base`'s ranks.
Mesh expert_mesh(Communicator base) {
  MeshSpec spec;
  spec.ici[axis_index(Axis::kExpert)] = 2;
  spec.ici[axis_index(Axis::kContextAutoregressive)] = -1;
  return Mesh(spec, std::move(base));
}

// kMixtralThreeExperts: the fixture's dimensions with 3 experts (random weights), which do not
// split over 2 or 4 ranks: every rank runs every expert, as under context_autoregressive alone.
enum class ModelKind { kDense, kMixtral, kMixtralDenseDispatch, kMixtralThreeExperts };

struct Case {
  const char* name;
  ModelKind model;
  DecodeSharding decode;
  bool int8 = false;  // int8 weights and KV cache
};

const Case kCases[] = {
    {"mixtral_sequence", ModelKind::kMixtral, DecodeSharding::kSequence},
    {"mixtral_batch", ModelKind::kMixtral, DecodeSharding::kBatch},
    {"mixtral_dense_dispatch_sequence", ModelKind::kMixtralDenseDispatch,
     DecodeSharding::kSequence},
    {"mixtral_dense_dispatch_batch", ModelKind::kMixtralDenseDispatch, DecodeSharding::kBatch},
    {"dense_model_batch", ModelKind::kDense, DecodeSharding::kBatch},
    {"mixtral_three_experts_sequence", ModelKind::kMixtralThreeExperts, DecodeSharding::kSequence},
    {"mixtral_sequence_int8", ModelKind::kMixtral, DecodeSharding::kSequence, true},
};

model::LlamaConfig model_config(ModelKind kind) {
  if (kind == ModelKind::kDense) {
    return model::llama_config_from_hf(std::string(testing::fixture_dir()) + "/config.json");
  }
  model::LlamaConfig c =
      model::llama_config_from_hf(std::string(testing::mixtral_fixture_dir()) + "/config.json");
  c.sparse_matmul = kind != ModelKind::kMixtralDenseDispatch;  // dense: no dropping (factor -1)
  if (kind == ModelKind::kMixtralThreeExperts) c.num_experts = 3;
  return c;
}

std::vector<float> model_weights(ModelKind kind, const model::LlamaConfig& c) {
  if (kind == ModelKind::kMixtralThreeExperts) return testing::init_weights(c, 5, 4.0f);
  return kind == ModelKind::kDense ? testing::fixture_weights(c)
                                   : testing::fixture_weights(c, testing::mixtral_fixture_dir());
}

InferenceSettings settings_for(DecodeSharding decode, bool int8) {
  InferenceSettings s;
  s.max_prefill_length = kPrefill;
  s.max_target_length = kTarget;
  s.decode = decode;
  s.quantize_kvcache = int8;
  s.int8_weights = int8;
  s.slots = kSlots;
  return s;
}

// The worst norm-relative error over every step and live slot.
double worst_error(const std::vector<std::vector<float>>& got,
                   const std::vector<std::vector<float>>& want,
                   const std::vector<std::vector<int32_t>>& tokens, int64_t V) {
  EXPECT_EQ(got.size(), want.size());
  double worst = 0.0;
  for (size_t step = 0; step < std::min(got.size(), want.size()); ++step) {
    for (int64_t b = 0; b < static_cast<int64_t>(tokens.size()); ++b) {
      if (step >= tokens[b].size()) continue;
      worst =
          std::max(worst, relative_error(got[step].data() + b * V, want[step].data() + b * V, V));
    }
  }
  return worst;
}

class ExpertAxisEquality : public ::testing::TestWithParam<Case> {};

TEST_P(ExpertAxisEquality, TokensAndLogitsMatchSingleDevice) {
  const Case& c = GetParam();
  const model::LlamaConfig mc = model_config(c.model);
  const std::vector<float> weights = model_weights(c.model, mc);
  const InferenceSettings s = settings_for(c.decode, c.int8);
  const Mesh mesh = expert_mesh(Communicator::world());
  const Mesh one = testing::ca_mesh(Communicator::self());  // the engines keep its axes
  InferenceEngine reference(cpu(), s, mc, weights, one);
  InferenceEngine engine(cpu(), s, mc, weights, mesh);
  ASSERT_EQ(engine.expert(), 2);
  ASSERT_EQ(engine.ca(), Communicator::world().size() / 2);
  // The fixture's 4 experts split over all 2 or 4 ranks; 3 run whole on every rank; a dense
  // model has none.
  const bool split = mc.moe && mc.num_experts % Communicator::world().size() == 0;
  EXPECT_EQ(engine.expert_ranks(), split ? Communicator::world().size() : 1);
  const auto prompts = testing::make_prompts(kSlots, kPrefill, mc.vocab_size, 3);
  const int64_t V = mc.vocab_size;
  if (c.int8) {
    // A last-bit difference can move a value across an int8 rounding boundary and flip a
    // near-tie of the argmax: both runs are fed the reference's tokens.
    const GenerateResult greedy = reference.generate(prompts);
    const auto want = testing::forced_logits(reference, prompts, greedy.tokens);
    const auto got = testing::forced_logits(engine, prompts, greedy.tokens);
    EXPECT_LE(worst_error(got, want, greedy.tokens, V), 5e-2) << c.name;
    return;
  }
  const GenerateResult want = reference.generate(prompts, true);
  const GenerateResult got = engine.generate(prompts, true);
  for (int64_t b = 0; b < kSlots; ++b) {
    EXPECT_EQ(got.tokens[b], want.tokens[b]) << "slot " << b;
    EXPECT_EQ(static_cast<int64_t>(prompts[b].size() + want.tokens[b].size()), kTarget);
  }
  EXPECT_LE(worst_error(got.logits, want.logits, want.tokens, V), 1e-5) << c.name;
}

INSTANTIATE_TEST_SUITE_P(Cases, ExpertAxisEquality, ::testing::ValuesIn(kCases),
                         [](const auto& test) { return std::string(test.param.name); });

// Rank r of the expert × ca group holds experts [r·X/n, (r+1)·X/n) and no other: its resident
// bytes are the one-rank engine's less the other ranks' experts.
TEST(ExpertAxisWeights, EachRankHoldsOnlyItsOwnExperts) {
  const model::LlamaConfig mc = model_config(ModelKind::kMixtral);
  const std::vector<float> weights = model_weights(ModelKind::kMixtral, mc);
  const Mesh mesh = expert_mesh(Communicator::world());
  const Communicator& group = parallel::inference_expert_group(mesh);
  ASSERT_EQ(group.size(), Communicator::world().size());
  const parallel::ExpertRange mine =
      parallel::local_experts(mc.num_experts, group.size(), group.rank());
  ASSERT_LT(mine.count, mc.num_experts);
  const Mesh one = testing::ca_mesh(Communicator::self());
  for (const bool int8 : {false, true}) {
    // Batch decode: no row split, whose int8 parts of the head would count too.
    const InferenceSettings s = settings_for(DecodeSharding::kBatch, int8);
    InferenceEngine reference(cpu(), s, mc, weights, one);
    InferenceEngine engine(cpu(), s, mc, weights, mesh);
    const int64_t others = other_experts_bytes(reference, engine, mine);
    EXPECT_GT(others, 0);
    // And the embedding and head rows of the other context_autoregressive ranks (issue #31).
    const int64_t other_rows = testing::other_vocab_bytes(reference, engine);
    EXPECT_EQ(other_rows > 0, mesh.axis_size(Axis::kContextAutoregressive) > 1);
    EXPECT_EQ(engine.resident_weight_bytes(),
              reference.resident_weight_bytes() - others - other_rows)
        << (int8 ? "int8" : "fp32");
  }
}

Config expert_config(std::vector<std::string> keys) {
  keys.insert(keys.end(), {"ici_expert_parallelism=2", "max_prefill_predict_length=16",
                           "max_target_length=24"});
  return load_config(MAXCTX_SOURCE_DIR "/configs/inference.yml", keys,
                     Communicator::world().size());
}

// `maxctx plan` on the expert mesh, against the engine built as decode and bench-inference
// build it (load_inference_model: random init of mixtral-tiny, each rank only its experts): the
// weights, their int8 copies, the KV cache and a decode step's bytes per rank; and the early
// memory check's weights are the loader's list.
class ExpertAxisPlan : public ::testing::TestWithParam<std::vector<std::string>> {};

TEST_P(ExpertAxisPlan, WeightsCacheAndStepBytesEqualTheEngines) {
  std::vector<std::string> keys = {"model_name=mixtral-tiny", "per_device_batch_size=2"};
  keys.insert(keys.end(), GetParam().begin(), GetParam().end());
  const Config config = expert_config(keys);
  const plan::InferencePlan plan = plan::plan_inference(config);
  EXPECT_EQ(plan.expert, 2);
  EXPECT_EQ(plan.ca, Communicator::world().size() / 2);
  const Mesh mesh = testing::mesh_of(config);
  const Communicator& group = parallel::inference_expert_group(mesh);
  InferenceModel model = load_inference_model(config, cpu(), mesh);
  // int8: the float tensors alone (no float copy of a projection), the projections as codes.
  const int64_t weight_bytes = static_cast<int64_t>(model.weights.view().bytes());
  InferenceEngine engine(cpu(), inference_settings_from(config, mesh), model.config,
                         std::move(model.weights), mesh, std::move(model.int8));
  const bool int8 = config.quantization == "int8";
  const int64_t resident = engine.resident_weight_bytes();
  EXPECT_EQ(model::inference_weight_bytes(
                engine.model_config(),
                parallel::inference_expert_ranks(engine.model_config().num_experts, group.size()),
                int8, mesh.axis_size(Axis::kContextAutoregressive)),
            static_cast<double>(resident));
  EXPECT_LT(static_cast<double>(resident), model::parameter_bytes(engine.model_config()));
  EXPECT_EQ(engine.expert_ranks(), group.size());
  EXPECT_EQ(plan.weight_bytes, weight_bytes);
  EXPECT_EQ(plan.int8_copy_bytes, engine.weights().int8_copy_bytes());
  EXPECT_EQ(plan.weight_bytes + plan.int8_copy_bytes, resident);
  EXPECT_EQ(plan.kv_cache_bytes, engine.cache().bytes());
  EXPECT_EQ(plan.decode_step_bytes, engine.weights().bytes_per_step(engine.decode_row_split()));
}

INSTANTIATE_TEST_SUITE_P(
    Keys, ExpertAxisPlan,
    ::testing::Values(std::vector<std::string>{},
                      std::vector<std::string>{"quantization=int8", "quantize_kvcache=true",
                                               "context_autoregressive_decode=batch"}),
    [](const auto& test) { return test.param.empty() ? "fp32" : "int8_batch"; });

TEST(ExpertAxisErrors, SlotsThatDoNotSplitAndAZeroCapacityAreClearErrors) {
  const model::LlamaConfig mc = model_config(ModelKind::kMixtral);
  const std::vector<float> weights = model_weights(ModelKind::kMixtral, mc);
  const Mesh mesh = expert_mesh(Communicator::world());
  InferenceSettings odd = settings_for(DecodeSharding::kSequence, false);
  odd.slots = 3;
  std::string e = error_of([&] { InferenceEngine(cpu(), odd, mc, weights, mesh); });
  EXPECT_NE(e.find("expert = 2 splits the 3 decode slots into 2 groups"), std::string::npos) << e;
  // A config that gives 1 slot (per_device_batch_size 1/devices) names the same.
  const int world = Communicator::world().size();
  e = error_of([&] {
    const Config c = expert_config({"per_device_batch_size=" + std::to_string(1.0 / world)});
    inference_settings_from(c, testing::mesh_of(c));
  });
  EXPECT_NE(e.find("expert = 2 splits the 1 decode slots into 2 groups"), std::string::npos) << e;
  if (world == 4) {
    // Batch decode splits a group's 1 slot over ca = 2.
    InferenceSettings batch = settings_for(DecodeSharding::kBatch, false);
    batch.slots = 2;
    e = error_of([&] { InferenceEngine(cpu(), batch, mc, weights, mesh); });
    EXPECT_NE(e.find("context_autoregressive_decode=batch splits the 1 decode slots of an expert "
                     "group (2 / expert = 2) over context_autoregressive = 2"),
              std::string::npos)
        << e;
  }
  // Dense dispatch at capacity_factor 0.5: a decode step's one token per sequence would have
  // no slot at any expert; refused when the engine is built, not mid-generation.
  model::LlamaConfig dropping = model_config(ModelKind::kMixtralDenseDispatch);
  dropping.capacity_factor = 0.5;
  e = error_of([&] {
    InferenceEngine(cpu(), settings_for(DecodeSharding::kSequence, false), dropping, weights, mesh);
  });
  EXPECT_NE(e.find("capacity_factor = 0.5 gives an expert capacity of 0 tokens"), std::string::npos)
      << e;
}

}  // namespace
}  // namespace maxctx::infer

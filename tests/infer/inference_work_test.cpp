// The inference plan's times (plan/inference_work.h, inference_plan.h): the work lists count
// what the forward runs, checked against independent counts of the model's weights and of
// attention; the predicted seconds are each kernel at the profile's table rate, or on a spec
// sheet's roofline (FLOPs at the peak or bytes over the bandwidth, the slower) without tables;
// and the stages' collectives equal what the engine's communicators count.
#include "maxctx/plan/inference_work.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <span>
#include <string>
#include <vector>

#include "infer/infer_test_util.h"
#include "maxctx/config/config.h"
#include "maxctx/infer/model_source.h"
#include "maxctx/mesh/communicator.h"
#include "maxctx/mesh/traffic.h"
#include "maxctx/model/llama_config.h"
#include "maxctx/plan/hardware_profile.h"
#include "maxctx/plan/inference_plan.h"
#include "support/mean_traffic.h"

namespace maxctx::infer {
namespace {

// `devices` ranks, context_autoregressive over `ca` of them (all, by default).
Config config_of(std::vector<std::string> keys, int devices = 1, int ca = 0) {
  if (ca == 0) ca = devices;
  if (std::none_of(keys.begin(), keys.end(),
                   [](const std::string& k) { return k.starts_with("model_name="); })) {
    keys.push_back("model_name=maxctx-tiny");
  }
  keys.insert(keys.begin(),
              {"per_device_batch_size=2", "max_prefill_predict_length=64", "max_target_length=96",
               "inference_microbenchmark_prefill_lengths=32,64"});
  if (ca > 1) keys.push_back("ici_context_autoregressive_parallelism=" + std::to_string(ca));
  return load_config(MAXCTX_SOURCE_DIR "/configs/inference.yml", keys, devices);
}

double matmul_flops(const plan::StageWork& w) {
  double flops = 0;
  for (const plan::InferenceMatmul& mm : w.matmuls) flops += mm.flops();
  return flops;
}

// Per token, the layers' projections: q, k, v, o and the SwiGLU MLP (2 FLOPs a weight).
double layer_flops_per_token(const model::LlamaConfig& m) {
  const double E = double(m.emb_dim), q = double(m.num_query_heads * m.head_dim),
               kv = double(m.kv_dim()), F = double(m.mlp_dim);
  return 2.0 * double(m.num_layers) * (E * q + 2 * E * kv + q * E + 3 * E * F);
}

TEST(InferenceWork, PrefillCountsEveryProjectionAndTheLastTokensHead) {
  const Config c = config_of({});
  const plan::InferencePlan p = plan::plan_inference(c);
  const model::LlamaConfig& m = p.model;
  ASSERT_EQ(p.prefill.size(), 2u);
  for (const plan::PrefillWork& x : p.prefill) {
    const double tokens = double(p.settings.slots * x.length);
    const double head = 2.0 * double(p.settings.slots) * double(m.emb_dim * m.vocab_size);
    EXPECT_DOUBLE_EQ(matmul_flops(x.work), tokens * layer_flops_per_token(m) + head);
    // MaxText's causal attention count: 4·P²·Hq·D/2 per prompt and layer.
    EXPECT_DOUBLE_EQ(x.work.attention_flops,
                     double(p.settings.slots) * 4.0 * double(x.length * x.length) *
                         double(m.num_query_heads * m.head_dim * m.num_layers) / 2);
    EXPECT_EQ(x.work.attention_kind, "float32_forward");
    for (const plan::InferenceMatmul& mm : x.work.matmuls) EXPECT_EQ(mm.kind, "float32");
  }
}

TEST(InferenceWork, DecodeSplitsTheMlpAndHeadRowsAndReadsThisRanksCache) {
  for (const int ca : {1, 2}) {
    const Config c = config_of({"quantization=int8", "quantize_kvcache=true"}, ca);
    const plan::InferencePlan p = plan::plan_inference(c);
    const model::LlamaConfig& m = p.model;
    const plan::StageWork& w = p.decode;
    const double slots = double(p.settings.slots);
    // Every slot's token on every rank (sequence sharding); the output rows of the attention
    // projections, of the MLP and of the head split over ca (rank 0's, the largest share).
    const double E = double(m.emb_dim), q = double(m.num_query_heads * m.head_dim),
                 F = double(m.mlp_dim), L = double(m.num_layers);
    const auto part = [&](int64_t rows) { return double(split_count(rows, ca, 0)); };
    const double expected =
        2.0 * slots *
        (L * (E * part(m.q_dim()) + 2 * E * part(m.kv_dim()) + q * part(m.emb_dim) +
              2 * E * part(m.mlp_dim) + F * part(m.emb_dim)) +
         E * part(m.vocab_size));
    EXPECT_DOUBLE_EQ(matmul_flops(w), expected) << "ca " << ca;
    for (const plan::InferenceMatmul& mm : w.matmuls) EXPECT_EQ(mm.kind, "int8_decode");
    EXPECT_EQ(w.attention_kind, "int8_decode");
    const double rows = double(ceil_div(p.settings.max_target_length, ca));
    EXPECT_DOUBLE_EQ(w.attention_flops, slots * rows * L * 4.0 * q) << "ca " << ca;
    EXPECT_DOUBLE_EQ(w.attention_bytes, slots * rows * L * 2 * double(m.kv_dim())) << "int8 codes";
  }
}

TEST(InferenceWork, SecondsAreTableRatesOrTheSpecSheetsRoofline) {
  const Config c = config_of({"quantization=int8", "quantize_kvcache=true"});
  const plan::InferencePlan p = plan::plan_inference(c);
  plan::HardwareProfile spec;  // a spec sheet: no tables
  spec.memory_bandwidth = 1e9;
  spec.flops_f32 = spec.flops_bf16 = spec.flops_int8 = 1e12;
  spec.ici = spec.dcn = {1e9, 1e-6};
  double bytes = p.decode.attention_bytes;
  for (const plan::InferenceMatmul& mm : p.decode.matmuls) bytes += mm.weight_bytes;
  double vector_bytes = 0;
  for (const plan::InferenceVectorWork& v : p.decode.vectors)
    vector_bytes += v.elements * v.bytes_per_element;
  const plan::InferenceTimes spec_times = plan::predict_inference(p, spec);
  EXPECT_DOUBLE_EQ(spec_times.decode_matmul_seconds + spec_times.decode_attention_seconds,
                   bytes / spec.memory_bandwidth);
  EXPECT_DOUBLE_EQ(spec_times.decode_vector_seconds, vector_bytes / spec.memory_bandwidth);
  // A prefill's matmuls: each the slower of its FLOPs at the peak and its weight's bytes.
  double roofline = 0;
  for (const plan::InferenceMatmul& mm : p.prefill[1].work.matmuls) {
    roofline += std::max(mm.flops() / spec.flops_int8, mm.weight_bytes / spec.memory_bandwidth);
  }
  EXPECT_DOUBLE_EQ(spec_times.prefill[1].matmul_seconds, roofline);
  EXPECT_GT(roofline, 0.0);

  plan::HardwareProfile measured = spec;  // flat tables: every size at one rate
  measured.matmul_by_size["int8_decode"] = {{1, 2e10}};
  measured.matmul_by_size["int8"] = {{128, 4e10}};
  measured.attention_by_head_dim["int8_decode"] = {{32, 5e9}};
  measured.attention_by_head_dim["float32_forward"] = {{32, 3e10}};
  for (const std::string& op : plan::inference_vector_ops()) measured.vector_rates[op] = 1e8;
  const plan::InferenceTimes t = plan::predict_inference(p, measured);
  // A decode matmul: its cost per call, then its FLOPs as 4 rows at least (the int8 tile's).
  measured.call_seconds["int8_decode"] = 1e-6;
  const plan::InferenceTimes with_calls = plan::predict_inference(p, measured);
  double timed = 0;
  for (const plan::InferenceMatmul& mm : p.decode.matmuls) {
    timed += mm.timed_flops();
    EXPECT_EQ(mm.timed_flops(), 2.0 * double(std::max<int64_t>(mm.rows, 4) * mm.inner * mm.cols));
  }
  EXPECT_DOUBLE_EQ(t.decode_matmul_seconds, timed / 2e10);
  EXPECT_DOUBLE_EQ(with_calls.decode_matmul_seconds,
                   timed / 2e10 + 1e-6 * double(p.decode.matmuls.size()));
  EXPECT_DOUBLE_EQ(t.decode_attention_seconds, p.decode.attention_flops / 5e9);
  double elements = 0;
  for (const plan::InferenceVectorWork& v : p.decode.vectors) elements += v.elements;
  EXPECT_DOUBLE_EQ(t.decode_vector_seconds, elements / 1e8);
  EXPECT_DOUBLE_EQ(t.decode_step_seconds,
                   t.decode_matmul_seconds + t.decode_attention_seconds + t.decode_vector_seconds);
  ASSERT_EQ(t.prefill.size(), 2u);
  const plan::StageWork& prefill = p.prefill[1].work;
  EXPECT_DOUBLE_EQ(t.prefill[1].matmul_seconds, matmul_flops(prefill) / 4e10);
  EXPECT_DOUBLE_EQ(t.prefill[1].attention_seconds, prefill.attention_flops / 3e10);

  // A decode step whose weights and cache rows fit the device's cache runs at the "_cached"
  // rates; one byte over, at the cold ones. The prefill is unchanged.
  measured.matmul_by_size["int8_decode_cached"] = {{1, 8e10}};
  measured.attention_by_head_dim["int8_decode_cached"] = {{32, 2e10}};
  const double step_bytes = static_cast<double>(p.decode_step_bytes + p.decode_cache_bytes);
  measured.cache_bytes = step_bytes;
  const plan::InferenceTimes cached = plan::predict_inference(p, measured);
  EXPECT_TRUE(cached.decode_operands_cached);
  EXPECT_DOUBLE_EQ(cached.decode_matmul_seconds,
                   timed / 8e10 + 1e-6 * double(p.decode.matmuls.size()));
  EXPECT_DOUBLE_EQ(cached.decode_attention_seconds, p.decode.attention_flops / 2e10);
  EXPECT_DOUBLE_EQ(cached.prefill[1].matmul_seconds, t.prefill[1].matmul_seconds);
  measured.cache_bytes = step_bytes - 1;
  const plan::InferenceTimes spilled = plan::predict_inference(p, measured);
  EXPECT_FALSE(spilled.decode_operands_cached);
  EXPECT_DOUBLE_EQ(spilled.decode_attention_seconds, t.decode_attention_seconds);
}

TEST(InferenceWork, Int8QuantizesEachProjectionInputOnce) {
  const plan::InferencePlan p = plan::plan_inference(config_of({"quantization=int8"}));
  const model::LlamaConfig& m = p.model;
  // Per token: the attention input (for q, k and v), o's input, the MLP input (gate and up),
  // down's input; and the head's rows.
  const double per_token =
      double(m.num_layers) * double(2 * m.emb_dim + m.num_query_heads * m.head_dim + m.mlp_dim);
  const plan::StageWork& w = p.prefill[0].work;
  double quantized = -1;
  for (const plan::InferenceVectorWork& v : w.vectors) {
    if (v.op == "quantize_rows") quantized = v.elements;
  }
  EXPECT_DOUBLE_EQ(quantized, double(p.settings.slots * p.prefill[0].length) * per_token +
                                  double(p.settings.slots * m.emb_dim));
}

// The plan's collectives are the engine's: a prefill and a decode step counted by the
// communicators, for both decode shardings and a mixture whose experts split over ca (its
// all-to-all bytes as their mean over the ranks).
class InferenceTrafficMatchesEngine : public ::testing::TestWithParam<std::vector<std::string>> {};

TEST_P(InferenceTrafficMatchesEngine, PrefillAndDecodeStep) {
  const int world = Communicator::world().size();
  std::vector<std::string> keys = GetParam();
  const bool expert_axis =
      std::find(keys.begin(), keys.end(), "ici_expert_parallelism=2") != keys.end();
  if (expert_axis && world % 2 != 0)
    GTEST_SKIP() << "the expert axis of 2 needs an even rank count";
  // With the expert axis, 2 expert groups of world / 2 ranks over ca.
  const Config c = config_of(keys, world, expert_axis ? world / 2 : world);
  const plan::InferencePlan p = plan::plan_inference(c);
  const Mesh mesh = testing::mesh_of(c);
  const kernels::Kernels& k = kernels::backend(Device::kCpu);
  InferenceModel model = load_inference_model(c, k, mesh);
  InferenceEngine engine(k, inference_settings_from(c, mesh), model.config,
                         std::move(model.weights), mesh, std::move(model.int8));
  const int64_t length = p.prefill.back().length;
  const std::vector<std::vector<int32_t>> prompts(
      static_cast<size_t>(p.settings.slots), std::vector<int32_t>(static_cast<size_t>(length), 3));
  mesh.world().barrier();
  reset_counted_traffic();
  engine.prefill(prompts);
  const Traffic prefill = maxctx::testing::with_mean_all_to_all(counted_traffic(), mesh.world());
  EXPECT_EQ(prefill, p.prefill.back().work.traffic)
      << "counted:\n"
      << format_traffic(prefill) << "planned:\n"
      << format_traffic(p.prefill.back().work.traffic);
  reset_counted_traffic();
  const std::vector<int32_t> tokens(static_cast<size_t>(p.settings.slots), 5);
  const std::vector<uint8_t> active(tokens.size(), 1);
  engine.decode_step(tokens, active);
  const Traffic decode = maxctx::testing::with_mean_all_to_all(counted_traffic(), mesh.world());
  EXPECT_EQ(decode, p.decode.traffic) << "counted:\n"
                                      << format_traffic(decode) << "planned:\n"
                                      << format_traffic(p.decode.traffic);
}

INSTANTIATE_TEST_SUITE_P(
    Cases, InferenceTrafficMatchesEngine,
    ::testing::Values(std::vector<std::string>{},
                      std::vector<std::string>{"quantization=int8", "quantize_kvcache=true"},
                      std::vector<std::string>{"context_autoregressive_decode=batch"},
                      std::vector<std::string>{"model_name=mixtral-tiny", "quantization=int8"},
                      // Expert groups: slots split over expert, experts over expert x ca.
                      std::vector<std::string>{"model_name=mixtral-tiny",
                                               "ici_expert_parallelism=2"},
                      std::vector<std::string>{"ici_expert_parallelism=2",
                                               "context_autoregressive_decode=batch"}));

}  // namespace
}  // namespace maxctx::infer

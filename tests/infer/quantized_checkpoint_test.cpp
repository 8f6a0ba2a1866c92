// Checkpoints saved already quantized (checkpoint_is_quantized, model/quantized_checkpoint.h):
// written from the tiny_llama and tiny_mixtral fixtures (and a tied one), loaded through
// load_inference_model as decode and bench-inference load them, they decode bit-identically (every
// token and every step's logits) to the F32 checkpoint quantized on load, on context_autoregressive
// = the ranks; and the ways such a checkpoint can be wrong are one clear error each.
#include "maxctx/model/quantized_checkpoint.h"

#include <fmt/ranges.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <string>

#include "infer/infer_test_util.h"
#include "maxctx/config/config.h"
#include "maxctx/infer/model_source.h"
#include "maxctx/io/gguf.h"
#include "maxctx/model/gguf_import.h"
#include "maxctx/model/hf_import.h"

namespace maxctx::infer {
namespace {

using testing::mesh_of;

namespace fs = std::filesystem;

const kernels::Kernels& cpu() { return maxctx::kernels::backend(maxctx::Device::kCpu); }

// A directory of this rank's own (every rank writes its copy: no rank waits on another's file).
fs::path scratch(const std::string& name) {
  const fs::path dir = fs::path(::testing::TempDir()) /
                       ("quantized_" + name + "_" + std::to_string(Communicator::world().rank()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

Config inference_config(std::vector<std::string> overrides) {
  overrides.insert(overrides.end(), {"max_prefill_predict_length=24", "max_target_length=40",
                                     "per_device_batch_size=1"});
  return load_config(MAXCTX_SOURCE_DIR "/configs/inference.yml", overrides,
                     Communicator::world().size());
}

// The fixture's F32 weights quantized into `dir`, with its config.json beside them.
fs::path write_quantized(const char* fixture, const std::string& name) {
  const fs::path dir = scratch(name);
  const model::LlamaConfig mc = model::llama_config_from_hf(fs::path(fixture) / "config.json");
  const std::vector<float> weights = testing::fixture_weights(mc, fixture);
  model::write_int8_checkpoint(cpu(), model::llama_weight_specs(mc), weights.data(), dir);
  fs::copy_file(fs::path(fixture) / "config.json", dir / "config.json");
  return dir;
}

GenerateResult decode(const Config& c) {
  const Mesh mesh = mesh_of(c);
  InferenceModel m = load_inference_model(c, cpu(), mesh);
  InferenceEngine engine(cpu(), inference_settings_from(c, mesh), m.config, std::move(m.weights),
                         mesh, std::move(m.int8));
  const auto prompts = testing::make_prompts(engine.settings().slots, 24, m.config.vocab_size, 5);
  return engine.generate(prompts, true);
}

class QuantizedCheckpoint : public ::testing::TestWithParam<const char*> {};

// `f32` (a Hugging Face directory) quantized on load and the quantized checkpoint `int8` decode
// bit-identically: every token and every step's logits.
void expect_same_decode(const std::string& f32, const fs::path& int8) {
  const GenerateResult want =
      decode(inference_config({"load_parameters_path=" + f32, "quantization=int8"}));
  const GenerateResult got =
      decode(inference_config({"load_parameters_path=" + int8.string(), "quantization=int8",
                               "checkpoint_is_quantized=true"}));
  EXPECT_EQ(got.tokens, want.tokens);
  ASSERT_EQ(got.logits.size(), want.logits.size());
  for (size_t step = 0; step < want.logits.size(); ++step) {
    ASSERT_EQ(got.logits[step].size(), want.logits[step].size());
    EXPECT_EQ(std::memcmp(got.logits[step].data(), want.logits[step].data(),
                          want.logits[step].size() * sizeof(float)),
              0)
        << "step " << step << " logits differ";
  }
}

void expect_decodes_as_quantized_on_load(const std::string& fixture) {
  const fs::path dir = write_quantized(fixture.c_str(), fs::path(fixture).filename().string());
  // The projections are 1 byte a weight: 0.42 of the F32 file here (the F32 embedding weighs
  // much in these tiny models), about a quarter for a full-size one.
  EXPECT_LT(fs::file_size(dir / "model.safetensors"),
            fs::file_size(fs::path(fixture) / "model.safetensors") / 2);
  expect_same_decode(fixture, dir);
}

TEST_P(QuantizedCheckpoint, DecodesBitIdenticallyToQuantizingOnLoad) {
  expect_decodes_as_quantized_on_load(GetParam());
}

// Tied embeddings (`maxctx export quantization=int8` of such a model): the head is the embedding,
// a float tensor in the checkpoint as it stays when quantizing on load.
TEST(QuantizedCheckpointTied, DecodesBitIdenticallyToQuantizingOnLoad) {
  expect_decodes_as_quantized_on_load(MAXCTX_TEST_FIXTURES "/tiny_llama_tied_scaled");
}

// A GGUF's int8 form (what decode and bench-inference load from it with quantization=int8):
// tiny_llama_q8_rows.gguf's 13 Q8_0 projections with one scale per row taken as stored, 2 with a
// scale per block quantized from their dequantized values. Every row of the 13 reaches ±127, so
// it decodes bit-identically to the dequantized F32 directory quantized on load.
// Also tiny_mixtral.gguf, whose Q8_0 experts (32 columns: one block, so one scale, a row) are
// taken as stored, each rank reading its own experts' codes.
TEST(QuantizedCheckpointGguf, Q8RowsDecodeAsDequantizeThenQuantize) {
  for (const char* name : {"tiny_llama_q8_rows", "tiny_mixtral"}) {
    SCOPED_TRACE(name);
    const fs::path dir = scratch(std::string("gguf_") + name);
    const io::GgufFile file(fs::path(MAXCTX_TEST_FIXTURES "/gguf") / (std::string(name) + ".gguf"));
    const std::string what = model::write_int8_directory_from_gguf(cpu(), file, dir / "int8");
    EXPECT_NE(
        what.find(name == std::string("tiny_mixtral") ? "8 Q8_0 projections taken as stored"
                                                      : "13 Q8_0 projections taken as stored"),
        std::string::npos)
        << what;
    model::write_hf_directory_from_gguf(file, dir / "f32");
    expect_same_decode((dir / "f32").string(), dir / "int8");
  }
}

// Loads `c` on its mesh (each rank its own experts) and on one rank (the whole model) and
// decodes both, the sharded run fed the one-rank run's tokens.
void expect_decodes_as_whole_model(const Config& c, const std::vector<std::string>& keys) {
  const std::string what = fmt::format("{}", fmt::join(keys, " "));
  const Mesh mesh = mesh_of(c);
  const Mesh one = testing::ca_mesh(Communicator::self());
  const InferenceSettings s = inference_settings_from(c, mesh);
  InferenceModel mine = load_inference_model(c, cpu(), mesh);
  InferenceModel whole = load_inference_model(c, cpu(), one);
  const int64_t ranks = parallel::inference_expert_group(mesh).size();
  // The experts split over the group, the vocabulary (embedding and head rows) over ca.
  const bool split = (mine.config.moe && mine.config.num_experts % ranks == 0 && ranks > 1) ||
                     mesh.axis_size(Axis::kContextAutoregressive) > 1;
  // int8: the projections are codes beside the float tensors (no float copy of them).
  EXPECT_EQ(mine.weights.numel() + mine.int8.codes.numel() <
                whole.weights.numel() + whole.int8.codes.numel(),
            split);
  InferenceEngine engine(cpu(), s, mine.config, std::move(mine.weights), mesh,
                         std::move(mine.int8));
  InferenceEngine reference(cpu(), s, whole.config, std::move(whole.weights), one,
                            std::move(whole.int8));
  const auto prompts = testing::make_prompts(s.slots, 24, engine.model_config().vocab_size, 5);
  const GenerateResult greedy = reference.generate(prompts);
  const auto want = testing::forced_logits(reference, prompts, greedy.tokens);
  const auto got = testing::forced_logits(engine, prompts, greedy.tokens);
  ASSERT_EQ(got.size(), want.size());
  const int64_t V = engine.model_config().vocab_size;
  double worst = 0.0;
  for (size_t step = 0; step < want.size(); ++step) {
    for (int64_t b = 0; b < s.slots; ++b) {
      if (step >= greedy.tokens[b].size()) continue;
      worst = std::max(
          worst, testing::relative_error(got[step].data() + b * V, want[step].data() + b * V, V));
    }
  }
  EXPECT_LE(worst, s.int8_weights ? 5e-2 : 1e-5) << what;
}

// Loaded on context_autoregressive = the ranks, and on {expert = 2, ca = the rest} for an even
// number of ranks, each rank reads only its own experts (4 over 2 ranks; every expert over 3),
// from the F32 checkpoint, the quantized one and (Mixtral) random init, and decodes as
// the whole model loaded on one rank: every step's logits, fed the one-rank run's tokens, within
// 1e-5 (fp32) and 5e-2 (int8 weights: inference_test.cpp's bound; a last-bit difference can move
// an activation across a rounding boundary of the quantizer).
TEST_P(QuantizedCheckpoint, EachRanksExpertsDecodeAsTheWholeModelOnOneRank) {
  const std::string fixture = GetParam();
  const fs::path dir = write_quantized(fixture.c_str(), fs::path(fixture).filename().string());
  std::vector<std::vector<std::string>> sources = {
      {"load_parameters_path=" + fixture},
      {"load_parameters_path=" + dir.string(), "quantization=int8",
       "checkpoint_is_quantized=true"}};
  if (fixture.ends_with("mixtral")) sources.push_back({"model_name=mixtral-tiny"});  // random
  // On an even number of ranks, also with the expert axis: {expert = 2, ca = the rest}, the
  // experts split over both (expert_axis_test runs the engine there).
  std::vector<std::vector<std::string>> meshes = {{}};
  if (Communicator::world().size() % 2 == 0) meshes.push_back({"ici_expert_parallelism=2"});
  for (const std::vector<std::string>& mesh_keys : meshes) {
    for (std::vector<std::string> keys : sources) {
      keys.insert(keys.end(), mesh_keys.begin(), mesh_keys.end());
      expect_decodes_as_whole_model(inference_config(keys), keys);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Fixtures, QuantizedCheckpoint,
                         ::testing::Values(MAXCTX_TEST_FIXTURES "/tiny_llama",
                                           MAXCTX_TEST_FIXTURES "/tiny_mixtral"),
                         [](const auto& param_info) {
                           return fs::path(param_info.param).filename().string();
                         });

std::string load_error(const std::vector<std::string>& overrides) {
  try {
    const Config c = inference_config(overrides);
    load_inference_model(c, cpu(), mesh_of(c));
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(QuantizedCheckpointErrors, EachIsOneClearError) {
  const std::string fixture = testing::fixture_dir();
  const fs::path good = write_quantized(fixture.c_str(), "errors");
  std::string e = load_error(
      {"load_parameters_path=" + fixture, "quantization=int8", "checkpoint_is_quantized=true"});
  EXPECT_NE(e.find("is not a quantized checkpoint"), std::string::npos) << e;
  e = load_error({"load_parameters_path=" + good.string(), "quantization=int8"});
  EXPECT_NE(e.find("is a quantized checkpoint (int8 projections): load it with "
                   "checkpoint_is_quantized=true"),
            std::string::npos)
      << e;
  e = load_error({"load_parameters_path=" + good.string(), "checkpoint_is_quantized=true"});
  EXPECT_NE(e.find("checkpoint_is_quantized=true needs load_parameters_path"), std::string::npos)
      << e;

  // A projection stored as F32 where the codes belong.
  const model::LlamaConfig mc = model::llama_config_from_hf(fs::path(fixture) / "config.json");
  const auto specs = model::llama_weight_specs(mc);
  const std::vector<float> weights = testing::fixture_weights(mc);
  const fs::path f32_dir = scratch("wrong_dtype");
  model::save_hf_weights(specs, weights.data(), f32_dir / "model.safetensors",
                         {{model::kQuantizationMetadataKey, "int8"}});
  fs::copy_file(fs::path(fixture) / "config.json", f32_dir / "config.json");
  e = load_error({"load_parameters_path=" + f32_dir.string(), "quantization=int8",
                  "checkpoint_is_quantized=true"});
  EXPECT_NE(e.find("model.layers.0.self_attn.q_proj.weight"), std::string::npos) << e;
  EXPECT_NE(e.find("I8"), std::string::npos) << e;
  EXPECT_NE(e.find("F32"), std::string::npos) << e;

  // Codes of another shape: a checkpoint of a model with a wider MLP under this config.json.
  model::LlamaConfig wider = mc;
  wider.mlp_dim += 16;
  const fs::path shape_dir = scratch("wrong_shape");
  const std::vector<float> wider_weights = testing::init_weights(wider, 3);
  model::write_int8_checkpoint(cpu(), model::llama_weight_specs(wider), wider_weights.data(),
                               shape_dir);
  fs::copy_file(fs::path(fixture) / "config.json", shape_dir / "config.json");
  e = load_error({"load_parameters_path=" + shape_dir.string(), "quantization=int8",
                  "checkpoint_is_quantized=true"});
  EXPECT_NE(e.find("model.layers.0.mlp.gate_proj.weight"), std::string::npos) << e;
  EXPECT_NE(e.find(std::to_string(wider.mlp_dim)), std::string::npos) << e;
}

}  // namespace
}  // namespace maxctx::infer

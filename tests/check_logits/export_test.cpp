// `maxctx export` in-process: a randomly initialised tiny model's training checkpoint (written
// by train/checkpoint.h write_checkpoint) goes out as a Hugging Face directory and comes back
// through llama_config_from_hf + load_hf_weights bit-exactly, for a GQA model with Llama 3.1
// RoPE scaling and the fixture SentencePiece tokenizer, and a tied Mistral-style model with a
// sliding window given as a run directory, and a Mixtral; a config that does not describe the
// checkpoint fails.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "io/temp_dir.h"
#include "maxctx/config/config.h"
#include "maxctx/core/check.h"
#include "maxctx/io/safetensors.h"
#include "maxctx/model/hf_import.h"
#include "maxctx/model/llama_config.h"
#include "maxctx/model/quantized_checkpoint.h"
#include "maxctx/model/weights.h"
#include "maxctx/tokenizer/tokenizer.h"
#include "maxctx/train/checkpoint.h"

namespace maxctx::cli {
using Args = std::vector<std::string>;
int run_export(const Args& args);  // src/cli/export.cpp
}  // namespace maxctx::cli

namespace maxctx {
namespace {

namespace fs = std::filesystem;
using io::TempDir;

const std::string kBase = std::string(MAXCTX_SOURCE_DIR) + "/configs/base.yml";

const std::vector<std::string> kGqaLlama31 = {"base_emb_dim=32",
                                              "base_num_query_heads=4",
                                              "base_num_kv_heads=2",
                                              "head_dim=8",
                                              "base_mlp_dim=48",
                                              "base_num_decoder_layers=3",
                                              "vocab_size=1000",
                                              "rope_type=llama3.1",
                                              "rope_max_timescale=500000",
                                              "rope_scaling_factor=8",
                                              "rope_original_max_position_embeddings=64",
                                              "normalization_layer_epsilon=1e-6"};
const std::vector<std::string> kTiedMistral = {
    "base_emb_dim=24",       "base_num_query_heads=2",
    "base_num_kv_heads=1",   "head_dim=16",
    "base_mlp_dim=40",       "base_num_decoder_layers=2",
    "vocab_size=64",         "logits_via_embedding=true",
    "decoder_block=mistral", "attention_type=local_sliding",
    "sliding_window_size=7"};

struct Checkpoint {
  model::LlamaConfig config;
  std::vector<model::WeightSpec> specs;
  std::vector<float> params;
  fs::path run_dir;
};

// `record`: state.json records the model (as a training run's checkpoint does); without it, the
// checkpoint of an older maxctx.
Checkpoint write_random_checkpoint(const fs::path& run_dir, const std::vector<std::string>& keys,
                                   int64_t step, bool record = false) {
  Checkpoint c;
  c.config = model::llama_config_from(load_config(kBase, keys, 1));
  c.specs = model::llama_weight_specs(c.config);
  c.params.resize(model::total_numel(c.specs));
  model::init_weights(c.specs, c.params.data(), 1234);
  // RMSNorm scales start at one; make them random too so that every tensor is distinct.
  for (size_t i = 0; i < c.params.size(); i += 3) c.params[i] *= 1.0f + 1e-3f * float(i % 17);
  const std::vector<float> moments(c.params.size(), 0.5f);
  train::CheckpointState state{step, 0, "test"};
  if (record) state.model = c.config;
  train::write_checkpoint(run_dir, state, c.specs, c.params, moments, moments);
  c.run_dir = run_dir;
  return c;
}

void expect_same_config(const model::LlamaConfig& a, const model::LlamaConfig& b) {
  EXPECT_EQ(a.vocab_size, b.vocab_size);
  EXPECT_EQ(a.emb_dim, b.emb_dim);
  EXPECT_EQ(a.num_query_heads, b.num_query_heads);
  EXPECT_EQ(a.num_kv_heads, b.num_kv_heads);
  EXPECT_EQ(a.head_dim, b.head_dim);
  EXPECT_EQ(a.mlp_dim, b.mlp_dim);
  EXPECT_EQ(a.num_layers, b.num_layers);
  EXPECT_EQ(a.norm_eps, b.norm_eps);
  EXPECT_EQ(a.rope.theta, b.rope.theta);
  EXPECT_EQ(a.rope.scaling, b.rope.scaling);
  EXPECT_EQ(a.rope.factor, b.rope.factor);
  EXPECT_EQ(a.rope.low_freq_factor, b.rope.low_freq_factor);
  EXPECT_EQ(a.rope.high_freq_factor, b.rope.high_freq_factor);
  EXPECT_EQ(a.rope.original_max_position_embeddings, b.rope.original_max_position_embeddings);
  EXPECT_EQ(a.tie_embeddings, b.tie_embeddings);
  EXPECT_EQ(a.sliding_window, b.sliding_window);
}

void expect_round_trip(const Checkpoint& c, const fs::path& out) {
  const model::LlamaConfig back = model::llama_config_from_hf(out / "config.json");
  expect_same_config(back, c.config);
  std::vector<float> loaded(c.params.size(), -1.0f);
  model::load_hf_weights(model::llama_weight_specs(back), loaded.data(), out);
  EXPECT_EQ(0, std::memcmp(loaded.data(), c.params.data(), c.params.size() * sizeof(float)));
}

std::vector<std::string> args_for(const std::vector<std::string>& keys, const fs::path& from,
                                  const fs::path& out) {
  std::vector<std::string> args = {kBase};
  args.insert(args.end(), keys.begin(), keys.end());
  args.push_back("load_parameters_path=" + from.string());
  args.push_back("base_output_directory=" + out.string());
  return args;
}

TEST(Export, GqaLlama31WithTokenizer) {
  TempDir dir;
  const Checkpoint c = write_random_checkpoint(dir.path() / "run", kGqaLlama31, 5);
  const fs::path out = dir.path() / "hf";
  std::vector<std::string> args =
      args_for(kGqaLlama31, train::checkpoint_directory(c.run_dir, 5), out);
  const std::string spm = std::string(MAXCTX_TEST_FIXTURES) + "/tokenizer/docs_spm.model";
  args.push_back("tokenizer_path=" + spm);
  ASSERT_EQ(cli::run_export(args), 0);
  expect_round_trip(c, out);

  std::ifstream in(out / "config.json");
  const nlohmann::json config = nlohmann::json::parse(in);
  EXPECT_EQ(config.at("architectures")[0], "LlamaForCausalLM");
  EXPECT_EQ(config.at("rope_scaling").at("rope_type"), "llama3");
  EXPECT_EQ(config.at("rms_norm_eps"), 1e-6);
  EXPECT_EQ(config.at("bos_token_id"), 1);
  EXPECT_EQ(config.at("eos_token_id"), 2);
  const auto tokenizer = tokenizer::load_tokenizer((out / "tokenizer.model").string());
  EXPECT_EQ(tokenizer->vocab_size(), 1000);
  EXPECT_EQ(fs::file_size(out / "tokenizer.model"), fs::file_size(spm));
}

TEST(Export, TiedMistralFromRunDirectory) {
  TempDir dir;
  write_random_checkpoint(dir.path() / "run", kTiedMistral, 2);
  // The run's latest checkpoint is taken: step 7, not step 2.
  const Checkpoint c = write_random_checkpoint(dir.path() / "run", kTiedMistral, 7);
  const fs::path out = dir.path() / "hf";
  ASSERT_EQ(cli::run_export(args_for(kTiedMistral, c.run_dir, out)), 0);
  expect_round_trip(c, out);
  std::ifstream in(out / "config.json");
  const nlohmann::json config = nlohmann::json::parse(in);
  EXPECT_EQ(config.at("model_type"), "mistral");
  EXPECT_EQ(config.at("sliding_window"), 7);
  EXPECT_EQ(config.at("tie_word_embeddings"), true);
  EXPECT_FALSE(config.contains("bos_token_id"));
}

// A Mixtral (the mixtral-tiny preset, 4 experts of which 2 per token) goes out as a
// MixtralConfig directory with the router and experts under Hugging Face Mixtral's names.
TEST(Export, MixtralRoundTrip) {
  TempDir dir;
  const std::vector<std::string> keys = {"model_name=mixtral-tiny"};
  const Checkpoint c = write_random_checkpoint(dir.path() / "run", keys, 3);
  const fs::path out = dir.path() / "hf";
  ASSERT_EQ(cli::run_export(args_for(keys, c.run_dir, out)), 0);
  expect_round_trip(c, out);
  const model::LlamaConfig back = model::llama_config_from_hf(out / "config.json");
  EXPECT_TRUE(back.moe);
  EXPECT_EQ(back.num_experts, 4);
  EXPECT_EQ(back.num_experts_per_tok, 2);
  std::ifstream in(out / "config.json");
  const nlohmann::json config = nlohmann::json::parse(in);
  EXPECT_EQ(config.at("architectures")[0], "MixtralForCausalLM");
  EXPECT_EQ(config.at("model_type"), "mixtral");
  EXPECT_EQ(config.at("num_local_experts"), 4);
  EXPECT_FALSE(config.contains("mlp_bias"));
  const io::SafetensorsFile weights((out / "model.safetensors").string());
  EXPECT_EQ(weights.info("model.layers.1.block_sparse_moe.gate.weight").shape,
            (std::vector<int64_t>{4, 64}));
  EXPECT_EQ(weights.info("model.layers.0.block_sparse_moe.experts.3.w2.weight").shape,
            (std::vector<int64_t>{64, 96}));
}

std::string export_error(const std::vector<std::string>& args) {
  try {
    cli::run_export(args);
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(Export, ConfigThatDoesNotDescribeTheCheckpointFails) {
  TempDir dir;
  const Checkpoint c = write_random_checkpoint(dir.path() / "run", kGqaLlama31, 1);
  const fs::path ckpt = train::checkpoint_directory(c.run_dir, 1);
  std::vector<std::string> fewer_layers = kGqaLlama31;
  fewer_layers[5] = "base_num_decoder_layers=2";
  EXPECT_NE(export_error(args_for(fewer_layers, ckpt, dir.path() / "a"))
                .find("tensors the config's model does not have (first: model.layers.2."),
            std::string::npos);
  std::vector<std::string> wider = kGqaLlama31;
  wider[4] = "base_mlp_dim=64";
  EXPECT_NE(export_error(args_for(wider, ckpt, dir.path() / "b")).find("mlp.gate_proj.weight"),
            std::string::npos)
      << export_error(args_for(wider, ckpt, dir.path() / "b"));
  EXPECT_NE(export_error(args_for(kGqaLlama31, dir.path() / "nothing", dir.path() / "c"))
                .find("neither a checkpoint"),
            std::string::npos);
  EXPECT_FALSE(fs::exists(dir.path() / "a"));
}

// quantization=int8 with tied embeddings: the projections as int8, the embedding (the head too)
// stays F32, and the directory reads back as a quantized checkpoint.
TEST(Export, TiedInt8) {
  TempDir dir;
  const Checkpoint c = write_random_checkpoint(dir.path() / "run", kTiedMistral, 3, true);
  const fs::path out = dir.path() / "int8";
  std::vector<std::string> args = args_for({}, c.run_dir, out);
  args.push_back("quantization=int8");
  ASSERT_EQ(cli::run_export(args), 0);
  EXPECT_TRUE(model::is_int8_checkpoint(out));
  const io::SafetensorsFile weights((out / "model.safetensors").string());
  EXPECT_EQ(weights.info("model.embed_tokens.weight").dtype, io::StDType::kF32);
}

// A checkpoint that records its model exports with no model keys at all (configs/base.yml's own
// model is 2048 wide, RoPE 10000, untied): the recorded model, Llama 3.1 scaling and experts
// included. A model key given must agree with the record.
TEST(Export, RecordedModelNeedsNoModelKeys) {
  for (const std::vector<std::string>& keys :
       {kGqaLlama31, kTiedMistral, std::vector<std::string>{"model_name=mixtral-tiny"}}) {
    SCOPED_TRACE(keys[0]);
    TempDir dir;
    const Checkpoint c = write_random_checkpoint(dir.path() / "run", keys, 4, /*record=*/true);
    const fs::path out = dir.path() / "hf";
    ASSERT_EQ(cli::run_export(args_for({}, c.run_dir, out)), 0);
    expect_round_trip(c, out);
    EXPECT_EQ(model::llama_config_from_hf(out / "config.json").num_experts_per_tok,
              c.config.num_experts_per_tok);
    ASSERT_EQ(cli::run_export(args_for(keys, c.run_dir, dir.path() / "same_keys")), 0);
  }
  TempDir dir;
  const Checkpoint c = write_random_checkpoint(dir.path() / "run", kGqaLlama31, 4, true);
  EXPECT_EQ(export_error(args_for({"rope_max_timescale=10000"}, c.run_dir, dir.path() / "a")),
            train::checkpoint_directory(c.run_dir, 4).string() +
                ": the checkpoint's model has rope_theta 500000.0, this run's has 10000.0 (config "
                "key rope_max_timescale); leave the key out to use the checkpoint's value");
  EXPECT_NE(export_error(args_for({"base_num_decoder_layers=2"}, c.run_dir, dir.path() / "b"))
                .find("num_layers 3, this run's has 2"),
            std::string::npos);
  EXPECT_NE(export_error(args_for({"rope_scaling_factor=4"}, c.run_dir, dir.path() / "c"))
                .find("rope_factor 8.0, this run's has 4.0"),
            std::string::npos);
  // A preset names the whole model: mixtral-tiny is not this checkpoint's model.
  EXPECT_NE(export_error(args_for({"model_name=mixtral-tiny"}, c.run_dir, dir.path() / "d"))
                .find("the checkpoint's model has"),
            std::string::npos);
  EXPECT_FALSE(fs::exists(dir.path() / "a" / "config.json"));
}

}  // namespace
}  // namespace maxctx

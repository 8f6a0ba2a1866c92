// The C++ model against the independent torch oracle (tools/reference/llama_reference.py,
// float64): logits and loss within 1e-5 and every weight gradient within 1e-4, norm-relative
// (llm.c's test_gpt2 pattern). Fixtures cover GQA + packed documents, tied embeddings with
// Llama 3.1 RoPE scaling and MHA, MQA with a sliding window, and a Mixtral (routing, experts and
// MaxText's load-balance loss, in the loss and the gradients).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>
#include <string>
#include <vector>

#include "maxctx/core/check.h"
#include "maxctx/io/safetensors.h"
#include "maxctx/model/hf_import.h"
#include "maxctx/model/inference.h"
#include "model_test_util.h"

namespace maxctx::model {
namespace {

using testing::norm_relative_error;

class TorchFixture : public ::testing::TestWithParam<std::string> {};

TEST_P(TorchFixture, LogitsLossAndGradientsMatchTorch) {
  const std::string dir = std::string(MAXCTX_TEST_FIXTURES) + "/" + GetParam();
  LlamaConfig config = llama_config_from_hf(dir + "/config.json");
  const io::SafetensorsFile reference(dir + "/reference.safetensors");
  // A Mixtral's reference loss includes MaxText's load-balance loss at the fixture's weight.
  if (config.moe)
    config.load_balance_loss_weight =
        std::stod(reference.metadata().at("load_balance_loss_weight"));
  testing::LocalModel m(config);
  load_hf_weights(m.specs, m.params.data(), dir);

  const auto& ids_info = reference.info("input_ids");
  const int64_t B = ids_info.shape[0];
  const int64_t S = ids_info.shape[1];
  const std::vector<int32_t> tokens = reference.read_i32("input_ids", {B, S});
  const std::vector<int32_t> targets = reference.read_i32("targets", {B, S});
  const std::vector<int32_t> positions = reference.read_i32("positions", {B, S});
  const std::vector<int32_t> segments = reference.read_i32("segment_ids", {B, S});
  std::vector<float> weights(B * S);
  for (int64_t i = 0; i < B * S; ++i) weights[i] = segments[i] != 0 ? 1.0f : 0.0f;
  const TokenBatch batch{
      B, S, tokens.data(), targets.data(), positions.data(), segments.data(), weights.data()};

  LlamaActivations acts = allocate_activations(*m.plan.kernels, m.config, B, S);
  const LossSums sums = llama_forward(m.config, m.weights, batch, m.plan, acts);
  const int64_t V = m.config.vocab_size;
  const std::vector<float> torch_logits = reference.read_f32("logits", {B, S, V});
  EXPECT_LT(norm_relative_error(acts.logits.data<float>(), torch_logits.data(), B * S * V), 1e-5);
  const float torch_loss = reference.read_f32("loss", {1})[0];
  const double lb_scale = m.config.moe ? moe_lb_scale(m.config, B) : 0.0;
  const double moe_lb_loss = sums.moe_lb_sum * lb_scale;
  const double loss = sums.loss_sum / sums.weight_sum + moe_lb_loss;
  EXPECT_LT(std::fabs(loss - torch_loss) / torch_loss, 1e-5) << loss << " vs " << torch_loss;
  if (m.config.moe) {
    const float torch_lb = reference.read_f32("moe_lb_loss", {1})[0];
    EXPECT_GT(torch_lb, 0.0f);
    EXPECT_LT(std::fabs(moe_lb_loss - torch_lb) / torch_lb, 1e-5)
        << moe_lb_loss << " vs " << torch_lb;
  }

  llama_backward(m.config, m.weights, m.gradients, batch, m.plan, acts,
                 static_cast<float>(1.0 / sums.weight_sum), static_cast<float>(lb_scale));
  int checked = 0;
  for (const WeightSpec& s : m.specs) {
    const std::vector<int64_t> shape =
        s.cols == 1 ? std::vector<int64_t>{s.rows} : std::vector<int64_t>{s.rows, s.cols};
    const std::vector<float> torch_grad = reference.read_f32("grad." + s.name, shape);
    EXPECT_LT(norm_relative_error(m.grads.data() + s.offset, torch_grad.data(), s.numel()), 1e-4)
        << s.name;
    ++checked;
  }
  EXPECT_EQ(checked, static_cast<int>(m.specs.size()));
}

INSTANTIATE_TEST_SUITE_P(Fixtures, TorchFixture,
                         ::testing::Values("tiny_llama", "tiny_llama_tied_scaled",
                                           "tiny_mistral_window", "tiny_llama_bf16",
                                           "tiny_mixtral"));

// The Hugging Face import's error for a config.json holding `text` ("no error" if it loads).
std::string import_error(const std::string& text, const std::string& file_name) {
  const std::string path = ::testing::TempDir() + "/" + file_name;
  std::ofstream(path) << text;
  try {
    llama_config_from_hf(path);
  } catch (const Error& e) {
    return e.what();
  }
  return "no error";
}

// A config.json with a field of the wrong type, or zero heads and no head_dim, is one error line
// naming the file (it used to end in std::terminate or SIGFPE); a container value in an error is
// shown by its type, never dumped.
TEST(HfConfig, HostileFieldsAreClearErrors) {
  const std::string base = std::string(MAXCTX_TEST_FIXTURES) + "/tiny_llama/config.json";
  std::ifstream in(base);
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const auto error_with = [&](const std::string& field, const std::string& value) {
    std::string edited = text;
    const size_t brace = edited.rfind('}');
    edited.insert(brace, ", \"" + field + "\": " + value + "\n");
    // The field may already be in the file: JSON keeps the last one.
    return import_error(edited, "hostile_config.json");
  };
  struct Case {
    const char* field;
    std::string value;
    const char* expected;  // part of the error
  };
  const std::vector<Case> cases = {
      {"model_type", "5", "has a field of the wrong type"},
      {"rope_scaling", "5", "'rope_scaling' = 5 must be an object"},
      {"tie_word_embeddings", "\"yes\"", "has a field of the wrong type"},
      {"hidden_size", "[[1]]", "'hidden_size' = <array> must be a whole"},
      {"rms_norm_eps", "[[1]]", "has the wrong type (<array>)"},
      {"hidden_size", std::string(100000, '[') + std::string(100000, ']'),
       "config.json is nested deeper than 64 levels"},
      {"hidden_size", "32.9", "'hidden_size' = 32.9 must be a whole number"},
      {"sliding_window", "4294967298", "must be a whole number in"},
      {"num_attention_heads", "0", "num_attention_heads = 0 must be positive"},
      // Issue #21, defects 6 and 7: sizes beyond the bounds, and numerics that decode garbage.
      {"num_hidden_layers", "1000000000",
       "num_hidden_layers = 1000000000 is more than maxctx accepts"},
      {"hidden_size", "8589934592", "hidden_size = 8589934592 is more than"},
      {"vocab_size", "1099511627776", "vocab_size = 1099511627776"},
      {"rms_norm_eps", "-1e-5", "rms_norm_eps = -1e-05 must be a positive number"},
      {"rms_norm_eps", "0", "rms_norm_eps = 0 must be a positive number"},
      {"rms_norm_eps", "1e-60", "must be a positive number"},
      {"rope_theta", "-5", "rope_theta = -5 must be a positive number"},
      {"sliding_window", "0", "sliding_window = 0 must be positive"},
      {"sliding_window", "-3", "sliding_window = -3 must be positive"},
  };
  for (const Case& c : cases) {
    const std::string error = error_with(c.field, c.value);
    EXPECT_NE(error.find(c.expected), std::string::npos)
        << c.field << " = " << c.value.substr(0, 40) << ": " << error;
  }
  EXPECT_EQ(error_with("sliding_window", "null"), "no error");
}

// A NaN or Inf anywhere in the weights is refused at load, naming the tensor and the element
// (it used to decode garbage with exit 0). The fixture is copied and one element overwritten.
TEST(HfWeights, NonFiniteValuesAreRefusedNamingTheTensor) {
  namespace fs = std::filesystem;
  const fs::path source = fs::path(MAXCTX_TEST_FIXTURES) / "tiny_llama";
  for (const float bad :
       {std::numeric_limits<float>::quiet_NaN(), -std::numeric_limits<float>::infinity()}) {
    const fs::path dir = fs::path(::testing::TempDir()) / "nan_weights";
    fs::remove_all(dir);
    fs::create_directories(dir);
    fs::copy_file(source / "config.json", dir / "config.json");
    fs::copy_file(source / "model.safetensors", dir / "model.safetensors");
    std::string name;
    uint64_t offset = 0;
    {
      const io::SafetensorsFile file(dir / "model.safetensors");
      const io::TensorInfo& info = file.tensors().back();
      name = info.name;
      ASSERT_EQ(info.dtype, io::StDType::kF32);
      std::ifstream in(dir / "model.safetensors", std::ios::binary);
      uint64_t header = 0;
      in.read(reinterpret_cast<char*>(&header), 8);
      offset = 8 + header + info.begin + 7 * sizeof(float);
    }
    {
      std::fstream out(dir / "model.safetensors", std::ios::in | std::ios::out | std::ios::binary);
      out.seekp(static_cast<std::streamoff>(offset));
      out.write(reinterpret_cast<const char*>(&bad), sizeof(bad));
    }
    testing::LocalModel m(llama_config_from_hf(dir / "config.json"));
    std::string error = "no error";
    try {
      load_hf_weights(m.specs, m.params.data(), dir);
    } catch (const Error& e) {
      error = e.what();
    }
    EXPECT_NE(
        error.find("tensor '" + name + "' holds a non-finite value (NaN or Inf) at element 7"),
        std::string::npos)
        << error;
  }
}

// MixtralConfig fields: experts only with model_type mixtral, router noise must be off, k within
// the experts.
TEST(HfConfig, MixtralFieldsAreChecked) {
  const std::string fixture = std::string(MAXCTX_TEST_FIXTURES) + "/tiny_mixtral";
  std::ifstream in(fixture + "/config.json");
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const auto error_with = [&](const std::string& from, const std::string& to) {
    std::string edited = text;
    const size_t at = edited.find(from);
    EXPECT_NE(at, std::string::npos) << from;
    edited.replace(at, from.size(), to);
    return import_error(edited, "mixtral_config.json");
  };
  EXPECT_NE(error_with("\"router_jitter_noise\": 0.0", "\"router_jitter_noise\": 0.1")
                .find("'router_jitter_noise' = 0.1 is not supported"),
            std::string::npos);
  EXPECT_NE(error_with("\"num_experts_per_tok\": 2", "\"num_experts_per_tok\": 5")
                .find("num_experts_per_tok = 5 must be between 1 and num_local_experts = 4"),
            std::string::npos);
  EXPECT_NE(error_with("\"model_type\": \"mixtral\"", "\"model_type\": \"llama\"")
                .find("need model_type mixtral"),
            std::string::npos);
}

// config.json files of every transformers vintage (tests/fixtures/hf_config_vintages, written by
// tools/reference/hf_config_vintages.py with transformers 4.57 and 5.25, save_pretrained's file
// and the use_diff=False dump of each): each model loads to the same LlamaConfig whatever wrote
// it, and to the dimensions the script gave. Then the RoPE fields' own rules: rope_theta inside
// or outside rope_parameters, disagreements and unknown rope types or fields refused by name.
namespace fs = std::filesystem;

const fs::path kVintages = fs::path(MAXCTX_TEST_FIXTURES) / "hf_config_vintages";

void expect_same(const LlamaConfig& a, const LlamaConfig& b, const std::string& what) {
  EXPECT_EQ(a.vocab_size, b.vocab_size) << what;
  EXPECT_EQ(a.emb_dim, b.emb_dim) << what;
  EXPECT_EQ(a.num_query_heads, b.num_query_heads) << what;
  EXPECT_EQ(a.num_kv_heads, b.num_kv_heads) << what;
  EXPECT_EQ(a.head_dim, b.head_dim) << what;
  EXPECT_EQ(a.mlp_dim, b.mlp_dim) << what;
  EXPECT_EQ(a.num_layers, b.num_layers) << what;
  EXPECT_EQ(a.norm_eps, b.norm_eps) << what;
  EXPECT_EQ(a.rope.theta, b.rope.theta) << what;
  EXPECT_EQ(a.rope.scaling, b.rope.scaling) << what;
  EXPECT_EQ(a.rope.factor, b.rope.factor) << what;
  EXPECT_EQ(a.rope.low_freq_factor, b.rope.low_freq_factor) << what;
  EXPECT_EQ(a.rope.high_freq_factor, b.rope.high_freq_factor) << what;
  EXPECT_EQ(a.rope.original_max_position_embeddings, b.rope.original_max_position_embeddings)
      << what;
  EXPECT_EQ(a.tie_embeddings, b.tie_embeddings) << what;
  EXPECT_EQ(a.sliding_window, b.sliding_window) << what;
  EXPECT_EQ(a.moe, b.moe) << what;
  EXPECT_EQ(a.num_experts, b.num_experts) << what;
  EXPECT_EQ(a.num_experts_per_tok, b.num_experts_per_tok) << what;
}

LlamaConfig expected_model(const std::string& name) {
  LlamaConfig m;
  m.norm_eps = 1e-5f;
  if (name == "llama3") {
    m.vocab_size = 96, m.emb_dim = 32, m.num_query_heads = 4, m.num_kv_heads = 2;
    m.head_dim = 8, m.mlp_dim = 48, m.num_layers = 2;
    m.rope.theta = 500000.0;
    m.rope.scaling = kernels::RopeScaling::kLlama3;
    m.rope.original_max_position_embeddings = 256.0;
  } else if (name == "llama_tied") {
    m.vocab_size = 64, m.emb_dim = 48, m.num_query_heads = 3, m.num_kv_heads = 1;
    m.head_dim = 16, m.mlp_dim = 64, m.num_layers = 2;
    m.rope.theta = 100000.0;
    m.tie_embeddings = true;
  } else if (name == "mistral") {
    m.vocab_size = 64, m.emb_dim = 32, m.num_query_heads = 2, m.num_kv_heads = 1;
    m.head_dim = 16, m.mlp_dim = 48, m.num_layers = 2;
    m.norm_eps = 1e-6f;
    m.sliding_window = 5;
  } else {
    m.vocab_size = 96, m.emb_dim = 32, m.num_query_heads = 4, m.num_kv_heads = 2;
    m.head_dim = 8, m.mlp_dim = 24, m.num_layers = 2;
    m.rope.theta = 1e6;
    m.moe = true, m.num_experts = 4, m.num_experts_per_tok = 2;
  }
  return m;
}

TEST(HfConfigVintages, EveryTransformersVintageLoadsToTheSameModel) {
  for (const std::string model : {"llama3", "llama_tied", "mistral", "mixtral"}) {
    const LlamaConfig expected = expected_model(model);
    for (const std::string vintage : {"t4", "t4.full", "t5", "t5.full"}) {
      const fs::path file = kVintages / (model + "." + vintage + ".json");
      ASSERT_TRUE(fs::exists(file)) << file;
      expect_same(llama_config_from_hf(file), expected, file.filename().string());
    }
  }
}

std::string read_text(const fs::path& path) {
  std::ifstream in(path);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

std::string vintage_error(const std::string& text) {
  return import_error(text, "vintage_config.json");
}

std::string replaced(std::string text, const std::string& from, const std::string& to) {
  const size_t at = text.find(from);
  EXPECT_NE(at, std::string::npos) << from;
  if (at != std::string::npos) text.replace(at, from.size(), to);
  return text;
}

TEST(HfConfigVintages, RopeFieldsAreCheckedByName) {
  struct Case {
    const char* file;
    std::string from, to;
    const char* expected;  // part of the error, or "no error"
  };
  const std::string pad = "\"pad_token_id\"";
  const std::vector<Case> cases = {
      // rope_theta beside rope_parameters is the same model when it agrees, an error when not.
      {"llama3.t5.json", pad, "\"rope_theta\": 500000.0, " + pad, "no error"},
      {"llama3.t5.json", pad, "\"rope_theta\": 10000.0, " + pad,
       "rope_theta = 10000 and rope_parameters.rope_theta = 500000 disagree"},
      {"llama3.t5.json", "\"rope_type\": \"llama3\"", "\"rope_type\": \"yarn\"",
       "rope_parameters rope_type 'yarn' is not supported"},
      {"llama3.t4.json", "\"rope_type\": \"llama3\"", "\"rope_type\": \"dynamic\"",
       "rope_scaling rope_type 'dynamic' is not supported"},
      {"llama3.t5.json", "\"factor\": 8.0", "\"factor\": 8.0, \"beta_fast\": 32",
       "'rope_parameters' fields not supported by the Llama import: beta_fast"},
      // Bookkeeping is accepted; a field that changes the math is still refused by name.
      {"llama3.t5.json", pad, "\"unk_token_id\": 0, " + pad, "no error"},
      {"llama3.t5.json", pad, "\"qk_layernorm\": true, " + pad,
       "fields not supported by the Llama import: qk_layernorm"},
      {"llama3.t5.json", pad, "\"rope_interleaved\": true, " + pad,
       "'rope_interleaved' = true is not supported"},
  };
  for (const Case& c : cases) {
    const std::string error = vintage_error(replaced(read_text(kVintages / c.file), c.from, c.to));
    EXPECT_NE(error.find(c.expected), std::string::npos) << c.to << ": " << error;
  }
}

// quantization=int8 quantizes every expert's w1, w3, w2 (the router stays fp32): the forward
// reads the int8 copies, and a step streams about a quarter of the fp32 expert bytes.
TEST(MixtralInt8, ExpertsReplaceTheFp32Views) {
  const std::string fixture = std::string(MAXCTX_TEST_FIXTURES) + "/tiny_mixtral";
  const LlamaConfig c = llama_config_from_hf(fixture + "/config.json");
  testing::LocalModel m(c);
  const InferenceWeights fp32(*m.plan.kernels, c, m.weights, /*quantize_int8=*/false);
  const InferenceWeights int8(*m.plan.kernels, c, m.weights, /*quantize_int8=*/true);
  for (const DecoderLayerWeights& l : int8.layers) {
    EXPECT_FALSE(l.moe.router.empty());
    ASSERT_EQ(static_cast<int64_t>(l.moe.experts.size()), c.num_experts);
    for (const ExpertWeights& e : l.moe.experts) {
      ASSERT_TRUE(e.w_gate_i8 != nullptr && e.w_up_i8 != nullptr && e.w_down_i8 != nullptr);
      EXPECT_TRUE(e.w_gate.empty() && e.w_up.empty() && e.w_down.empty());
      EXPECT_EQ(e.w_gate_i8->out_dim, c.mlp_dim);
      EXPECT_EQ(e.w_down_i8->out_dim, c.emb_dim);
    }
  }
  EXPECT_LT(int8.bytes_per_step(), fp32.bytes_per_step() / 2);
}

}  // namespace
}  // namespace maxctx::model

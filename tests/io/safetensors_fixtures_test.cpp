// Reads the files tools/reference/ wrote in Python (struct + json, numpy and torch conversions)
// with the C++ reader: the cross-implementation check of the format, and of the f16/bf16
// conversions against numpy's and torch's. Also checks that each Llama fixture is what its
// README says: Hugging Face names and shapes from config.json, a packed batch whose targets are
// the next token of the same document, a stored loss equal to the loss of the stored logits, and
// golden logits that agree with the packed reference.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "maxctx/io/safetensors.h"

namespace maxctx::io {
namespace {

const std::filesystem::path kFixtures = MAXCTX_TEST_FIXTURES;

template <typename T>
std::vector<T> values_of(const SafetensorsFile& file, const std::string& name, StDType dtype,
                         const std::vector<int64_t>& shape) {
  const auto bytes = file.bytes(file.expect(name, dtype, shape));
  std::vector<T> out(bytes.size() / sizeof(T));
  std::memcpy(out.data(), bytes.data(), bytes.size());
  return out;
}

uint32_t bits_of(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof(bits));
  return bits;
}

TEST(PythonWrittenFile, EveryDTypeReadsAsWritten) {
  const SafetensorsFile file(kFixtures / "safetensors_dtypes" / "all_dtypes.safetensors");
  EXPECT_EQ(file.metadata().at("format"), "pt");
  EXPECT_EQ(file.tensors().size(), 17u);

  std::vector<int64_t> n(24);
  for (int64_t i = 0; i < 24; ++i) n[i] = i;
  const auto expect_each = [&](auto values, auto formula) {
    ASSERT_EQ(values.size(), n.size());
    for (size_t i = 0; i < n.size(); ++i) EXPECT_EQ(values[i], formula(n[i])) << i;
  };
  expect_each(values_of<double>(file, "f64", StDType::kF64, {2, 3, 4}),
              [](int64_t i) { return i * 0.25 - 3.0; });
  expect_each(values_of<int8_t>(file, "i8", StDType::kI8, {4, 6}),
              [](int64_t i) { return static_cast<int8_t>(i * 11 - 128); });
  expect_each(values_of<uint8_t>(file, "u8", StDType::kU8, {2, 12}),
              [](int64_t i) { return static_cast<uint8_t>(i * 37 % 256); });
  expect_each(values_of<int16_t>(file, "i16", StDType::kI16, {24}),
              [](int64_t i) { return static_cast<int16_t>(i * 1000 - 12000); });
  expect_each(values_of<uint16_t>(file, "u16", StDType::kU16, {3, 8}),
              [](int64_t i) { return static_cast<uint16_t>(i * 2800); });
  expect_each(values_of<int32_t>(file, "i32", StDType::kI32, {6, 4}),
              [](int64_t i) { return static_cast<int32_t>(i * 100003 - 1000000); });
  expect_each(values_of<uint32_t>(file, "u32", StDType::kU32, {24}),
              [](int64_t i) { return static_cast<uint32_t>(i * 200000000); });
  expect_each(values_of<int64_t>(file, "i64", StDType::kI64, {2, 12}),
              [](int64_t i) { return i * 3000000000 - 30000000000; });
  expect_each(values_of<uint64_t>(file, "u64", StDType::kU64, {24}),
              [](int64_t i) { return static_cast<uint64_t>(i * 7); });
  expect_each(values_of<uint8_t>(file, "bool", StDType::kBool, {4, 6}),
              [](int64_t i) { return static_cast<uint8_t>(i % 3 == 0); });
  EXPECT_EQ(file.read_f32("scalar", {}), std::vector<float>{2.5f});
  EXPECT_TRUE(file.read_f32("empty", {0, 4}).empty());
  EXPECT_EQ(file.read_i32("i32", {6, 4})[23], 23 * 100003 - 1000000);
  EXPECT_THAT(file.read_i32("u16", {3, 8})[23], 23 * 2800);
  try {
    file.read_i32("u32", {24});
    ADD_FAILURE() << "u32 beyond int32 read as int32";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), testing::HasSubstr("element 11 is 2200000000, outside int32"));
  }
}

// numpy's float16 and torch's bfloat16 of the same f32 values, against this project's
// conversions, both directions, bit for bit (NaN only as NaN).
TEST(PythonWrittenFile, HalfConversionsAgreeWithNumpyAndTorch) {
  const SafetensorsFile file(kFixtures / "safetensors_dtypes" / "all_dtypes.safetensors");
  const std::vector<float> source = file.read_f32("f32.values", {1024});
  const auto f16_bits = values_of<uint16_t>(file, "f16.values", StDType::kF16, {1024});
  const std::vector<float> f16_wide = file.read_f32("f16.as_f32", {1024});
  const auto bf16_bits = values_of<uint16_t>(file, "bf16.values", StDType::kBF16, {1024});
  const std::vector<float> bf16_wide = file.read_f32("bf16.as_f32", {1024});
  EXPECT_EQ(file.read_f32("f16.values", {1024}).size(), 1024u);
  int subnormal_f16 = 0;
  for (size_t i = 0; i < source.size(); ++i) {
    if (std::isnan(source[i])) {
      EXPECT_TRUE(std::isnan(f16_to_f32(f16_bits[i])));
      EXPECT_TRUE(std::isnan(f16_to_f32(f32_to_f16(source[i]))));
      EXPECT_TRUE(std::isnan(bf16_to_float(float_to_bf16(source[i]))));
      continue;
    }
    subnormal_f16 += (f16_bits[i] & 0x7c00) == 0 && (f16_bits[i] & 0x3ff) != 0;
    EXPECT_EQ(f32_to_f16(source[i]), f16_bits[i]) << i << ": " << source[i];
    EXPECT_EQ(bits_of(f16_to_f32(f16_bits[i])), bits_of(f16_wide[i])) << i;
    EXPECT_EQ(float_to_bf16(source[i]).bits, bf16_bits[i]) << i << ": " << source[i];
    EXPECT_EQ(bits_of(bf16_to_float(bf16{bf16_bits[i]})), bits_of(bf16_wide[i])) << i;
  }
  EXPECT_GT(subnormal_f16, 50) << "the fixture should exercise f16 subnormals";
  const std::vector<float> f16_read = file.read_f32("f16.values", {1024});
  const std::vector<float> bf16_read = file.read_f32("bf16.values", {1024});
  for (size_t i = 0; i < source.size(); ++i) {
    if (std::isnan(source[i])) continue;
    EXPECT_EQ(bits_of(f16_read[i]), bits_of(f16_wide[i])) << i;
    EXPECT_EQ(bits_of(bf16_read[i]), bits_of(bf16_wide[i])) << i;
  }
}

nlohmann::json read_json(const std::filesystem::path& path) {
  std::ifstream in(path);
  EXPECT_TRUE(in) << path;
  return nlohmann::json::parse(in);
}

// Hugging Face names and shapes, from config.json alone.
std::vector<std::pair<std::string, std::vector<int64_t>>> hf_weights(const nlohmann::json& cfg) {
  const int64_t d = cfg["hidden_size"], f = cfg["intermediate_size"], v = cfg["vocab_size"];
  const int64_t dh = cfg["head_dim"], hq = cfg["num_attention_heads"];
  const int64_t hkv = cfg["num_key_value_heads"];
  std::vector<std::pair<std::string, std::vector<int64_t>>> out = {
      {"model.embed_tokens.weight", {v, d}}, {"model.norm.weight", {d}}};
  if (!cfg["tie_word_embeddings"].get<bool>()) out.push_back({"lm_head.weight", {v, d}});
  for (int i = 0; i < cfg["num_hidden_layers"].get<int>(); ++i) {
    const std::string p = "model.layers." + std::to_string(i) + ".";
    out.push_back({p + "input_layernorm.weight", {d}});
    out.push_back({p + "post_attention_layernorm.weight", {d}});
    out.push_back({p + "self_attn.q_proj.weight", {hq * dh, d}});
    out.push_back({p + "self_attn.k_proj.weight", {hkv * dh, d}});
    out.push_back({p + "self_attn.v_proj.weight", {hkv * dh, d}});
    out.push_back({p + "self_attn.o_proj.weight", {d, hq * dh}});
    out.push_back({p + "mlp.gate_proj.weight", {f, d}});
    out.push_back({p + "mlp.up_proj.weight", {f, d}});
    out.push_back({p + "mlp.down_proj.weight", {d, f}});
  }
  return out;
}

// Cross-entropy of the stored logits over tokens with segment != 0, in double.
double loss_of_logits(const std::vector<float>& logits, const std::vector<int32_t>& targets,
                      const std::vector<int32_t>& segments, int64_t vocab) {
  double total = 0;
  int64_t count = 0;
  for (size_t t = 0; t < targets.size(); ++t) {
    if (segments[t] == 0) continue;
    const float* row = logits.data() + t * vocab;
    const double max = *std::max_element(row, row + vocab);
    double sum = 0;
    for (int64_t j = 0; j < vocab; ++j) sum += std::exp(row[j] - max);
    total += std::log(sum) + max - row[targets[t]];
    ++count;
  }
  return total / static_cast<double>(count);
}

class LlamaFixture : public testing::TestWithParam<std::string> {};

TEST_P(LlamaFixture, MatchesItsConfigAndIsSelfConsistent) {
  const std::filesystem::path dir = kFixtures / GetParam();
  const nlohmann::json cfg = read_json(dir / "config.json");
  EXPECT_EQ(cfg["model_type"], "llama");
  EXPECT_EQ(cfg["architectures"], nlohmann::json::array({"LlamaForCausalLM"}));
  const int64_t vocab = cfg["vocab_size"];

  const SafetensorsFile model(dir / "model.safetensors");
  const auto weights = hf_weights(cfg);
  EXPECT_EQ(model.tensors().size(), weights.size());
  EXPECT_EQ(model.metadata().at("format"), "pt");
  for (const auto& [name, shape] : weights) {
    model.expect(name, StDType::kF32, shape);
    for (float value : model.read_f32(name, shape)) ASSERT_TRUE(std::isfinite(value)) << name;
  }

  const SafetensorsFile reference(dir / "reference.safetensors");
  const TensorInfo& ids = reference.info("input_ids");
  ASSERT_EQ(ids.shape.size(), 2u);
  const int64_t batch = ids.shape[0], seq = ids.shape[1];
  EXPECT_EQ(batch, 2);
  EXPECT_EQ(reference.tensors().size(), 6 + weights.size());
  const auto tokens = reference.read_i32("input_ids", {batch, seq});
  const auto positions = reference.read_i32("positions", {batch, seq});
  const auto segments = reference.read_i32("segment_ids", {batch, seq});
  const auto targets = reference.read_i32("targets", {batch, seq});
  for (const char* name : {"input_ids", "positions", "segment_ids", "targets"}) {
    reference.expect(name, StDType::kI32, {batch, seq});
  }
  const std::vector<float> logits = reference.read_f32("logits", {batch, seq, vocab});
  const std::vector<float> loss = reference.read_f32("loss", {1});
  for (const auto& [name, shape] : weights) reference.expect("grad." + name, StDType::kF32, shape);

  // The packed batch: documents numbered from 1 per row, positions 0.. per document, padding
  // (segment 0) only at a row's end, targets the next token of the same document.
  int documents = 0;
  int padding = 0;
  for (int64_t b = 0; b < batch; ++b) {
    for (int64_t s = 0; s < seq; ++s) {
      const int64_t t = b * seq + s;
      ASSERT_GE(tokens[t], 0);
      ASSERT_LT(tokens[t], vocab);
      ASSERT_LT(targets[t], vocab);
      const bool starts = s == 0 || segments[t] != segments[t - 1];
      EXPECT_EQ(positions[t], starts ? 0 : positions[t - 1] + 1) << b << "," << s;
      if (s > 0 && segments[t - 1] == 0) {
        EXPECT_EQ(segments[t], 0) << "padding mid-row";
      }
      if (s > 0 && !starts && segments[t] != 0) {
        EXPECT_EQ(targets[t - 1], tokens[t]);
      }
      documents += starts && segments[t] != 0;
      padding += segments[t] == 0;
    }
  }
  EXPECT_GE(documents, 3) << "the batch should pack several documents";
  EXPECT_GT(padding, 0) << "the batch should have padding";

  // The stored loss is the loss of the stored logits: f32 rounding of the logits moves it by
  // ~1e-7 relative.
  const double loss_f64 = std::stod(reference.metadata().at("loss_f64"));
  EXPECT_NEAR(loss_of_logits(logits, targets, segments, vocab), loss_f64, 1e-6 * loss_f64);
  EXPECT_NEAR(loss[0], loss_f64, 1e-7 * loss_f64);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, LlamaFixture,
                         testing::Values("tiny_llama", "tiny_llama_tied_scaled",
                                         "tiny_mistral_window"));

TEST(LlamaFixtureConfigs, CoverTheirFeatures) {
  const nlohmann::json tied = read_json(kFixtures / "tiny_llama_tied_scaled" / "config.json");
  EXPECT_TRUE(tied["tie_word_embeddings"].get<bool>());
  EXPECT_EQ(tied["rope_scaling"]["rope_type"], "llama3");
  EXPECT_EQ(tied["num_attention_heads"], tied["num_key_value_heads"]);
  const nlohmann::json window = read_json(kFixtures / "tiny_mistral_window" / "config.json");
  EXPECT_EQ(window["sliding_window"], 5);
  EXPECT_EQ(window["num_key_value_heads"], 1);
  const nlohmann::json plain = read_json(kFixtures / "tiny_llama" / "config.json");
  EXPECT_TRUE(plain["rope_scaling"].is_null());
  EXPECT_FALSE(plain.contains("sliding_window"));
}

// MaxText's forward_pass_logit_checker format; the first prompt is row 0's first document, so
// its logits are those of the packed reference (separate float64 runs, each rounded to f32).
TEST(GoldenLogits, MaxTextFormatAndAgreesWithPackedReference) {
  const std::filesystem::path dir = kFixtures / "tiny_llama";
  const int64_t vocab = read_json(dir / "config.json")["vocab_size"];
  std::ifstream in(dir / "golden_logits.jsonl");
  std::vector<nlohmann::json> lines;
  for (std::string line; std::getline(in, line);) lines.push_back(nlohmann::json::parse(line));
  ASSERT_EQ(lines.size(), 2u);
  for (const nlohmann::json& line : lines) {
    EXPECT_TRUE(line["prompt"].is_string());
    ASSERT_EQ(line["logits"].size(), line["tokens"].size());
    for (const auto& row : line["logits"]) ASSERT_EQ(static_cast<int64_t>(row.size()), vocab);
  }

  const SafetensorsFile reference(dir / "reference.safetensors");
  const int64_t seq = reference.info("input_ids").shape[1];
  const auto tokens = reference.read_i32("input_ids", {2, seq});
  const auto segments = reference.read_i32("segment_ids", {2, seq});
  const std::vector<float> logits = reference.read_f32("logits", {2, seq, vocab});
  const auto& prompt = lines[0]["tokens"];
  const int64_t n = static_cast<int64_t>(prompt.size());
  ASSERT_LT(n, seq);
  EXPECT_NE(segments[n], segments[n - 1]) << "prompt 0 is the whole first document";
  double worst = 0;
  for (int64_t s = 0; s < n; ++s) {
    EXPECT_EQ(prompt[s].get<int32_t>(), tokens[s]);
    for (int64_t j = 0; j < vocab; ++j) {
      const double golden = lines[0]["logits"][s][j].get<double>();
      const double packed = logits[s * vocab + j];
      worst = std::max(worst, std::abs(golden - packed) / std::max(1.0, std::abs(packed)));
    }
  }
  EXPECT_LT(worst, 1e-6);
}

}  // namespace
}  // namespace maxctx::io

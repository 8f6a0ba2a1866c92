// GGUF in: tests/fixtures/gguf/tiny_llama_mixed.gguf (tools/reference/gguf_fixture.py: tiny_llama's
// weights written by llama.cpp's gguf-py as its converter writes them, Q/K rows permuted, the
// tensor types mixed over F32, F16, BF16, Q8_0, Q4_0 and Q4_1) converted to a Hugging Face
// directory: every tensor equals gguf-py's dequantization in Hugging Face row order
// (expected.json: sums, an order-sensitive sum, the first values), lies within its type's
// rounding of the original F32 weights, the config maps back to tiny_llama's, and the embedded
// byte-level tokenizer loads. Damaged files are one error naming the problem.
#include "maxctx/io/gguf.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "io/temp_dir.h"
#include "maxctx/core/check.h"
#include "maxctx/io/safetensors.h"
#include "maxctx/kernels/kernels.h"
#include "maxctx/kernels/types.h"
#include "maxctx/model/gguf_import.h"
#include "maxctx/model/hf_import.h"
#include "maxctx/model/quantized_checkpoint.h"
#include "maxctx/model/weights.h"
#include "maxctx/tokenizer/tokenizer.h"

namespace maxctx::model {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

const fs::path kFixtures = fs::path(MAXCTX_TEST_FIXTURES);
const fs::path kGguf = kFixtures / "gguf" / "tiny_llama_mixed.gguf";

std::vector<float> load(const fs::path& dir, const LlamaConfig& config,
                        std::vector<WeightSpec>& specs) {
  specs = llama_weight_specs(config);
  std::vector<float> flat(static_cast<size_t>(total_numel(specs)));
  load_hf_weights(specs, flat.data(), dir);
  return flat;
}

// Every converted tensor equals gguf-py's dequantization of what the fixture stores, in Hugging
// Face row order (`expected`: sums, an order-sensitive sum, the first values), and lies within its
// type's rounding of the original F32 weights.
void expect_as_gguf_py(const std::vector<WeightSpec>& specs, const std::vector<float>& converted,
                       const std::vector<float>& original, const json& expected) {
  ASSERT_EQ(converted.size(), original.size());
  // The largest rounding of each type, relative to the tensor's largest magnitude: ggml's
  // block scale d is amax/8 (Q4_0), (max - min)/15 (Q4_1), amax/127 (Q8_0), values round to d/2
  // (Q4_0's +8 clips to +7: d there).
  const std::map<std::string, double> bound = {{"F32", 0.0},     {"F16", 1e-3},  {"BF16", 4e-3},
                                               {"Q8_0", 4.5e-3}, {"Q4_0", 0.13}, {"Q4_1", 6.8e-2}};
  for (const WeightSpec& s : specs) {
    SCOPED_TRACE(s.name);
    const json& e = expected.at(s.name);
    const float* got = converted.data() + s.offset;
    const float* f32 = original.data() + s.offset;
    double sum = 0, sum_sq = 0, weighted = 0, amax = 0, max_diff = 0;
    for (int64_t k = 0; k < s.numel(); ++k) {
      sum += got[k];
      sum_sq += double{got[k]} * got[k];
      weighted += double{got[k]} * static_cast<double>(k);
      amax = std::max(amax, std::abs(double{f32[k]}));
      max_diff = std::max(max_diff, std::abs(double{got[k]} - f32[k]));
    }
    weighted /= static_cast<double>(s.numel());
    const auto near = [](double a, double b) {
      return std::abs(a - b) <= 1e-9 * (1 + std::abs(b));
    };
    EXPECT_TRUE(near(sum, e.at("sum"))) << sum << " vs " << e.at("sum");
    EXPECT_TRUE(near(sum_sq, e.at("sum_sq"))) << sum_sq << " vs " << e.at("sum_sq");
    EXPECT_TRUE(near(weighted, e.at("index_weighted"))) << weighted;
    for (int k = 0; k < 8; ++k) EXPECT_EQ(got[k], e.at("first")[k].get<float>()) << k;
    EXPECT_LE(max_diff, bound.at(e.at("type")) * amax) << e.at("type") << ": " << max_diff / amax;
  }
}

std::string read_bytes(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// The error converting `content` as a GGUF file, or "no error".
std::string conversion_error(const io::TempDir& dir, const std::string& content) {
  const fs::path path = dir.path() / "damaged.gguf";
  std::ofstream(path, std::ios::binary) << content;
  try {
    write_hf_directory_from_gguf(io::GgufFile(path), dir.path() / "out");
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()).find('\n'), std::string::npos);
    return std::string(e.what());
  }
  return std::string("no error");
}

TEST(Gguf, MixedTypesDequantizeAndUnpermuteAsLlamaCpp) {
  const io::GgufFile file(kGguf);
  EXPECT_EQ(file.version(), 3u);
  EXPECT_EQ(file.string("general.architecture"), "llama");
  EXPECT_EQ(file.strings("tokenizer.ggml.tokens").size(), 96u);
  const LlamaConfig gguf_config = llama_config_from_gguf(file);
  const LlamaConfig hf_config = llama_config_from_hf(kFixtures / "tiny_llama" / "config.json");
  EXPECT_EQ(gguf_config.num_parameters(), hf_config.num_parameters());
  EXPECT_EQ(gguf_config.head_dim, 8);
  EXPECT_EQ(gguf_config.num_kv_heads, 2);
  EXPECT_EQ(gguf_config.rope.theta, hf_config.rope.theta);
  EXPECT_FLOAT_EQ(gguf_config.norm_eps, hf_config.norm_eps);
  EXPECT_FALSE(gguf_config.tie_embeddings);

  io::TempDir dir;
  const std::string what = write_hf_directory_from_gguf(file, dir.path() / "hf");
  EXPECT_NE(what.find("21 tensors (2 BF16, 3 F16, 6 F32, 3 Q4_0, 3 Q4_1, 4 Q8_0)"),
            std::string::npos)
      << what;
  std::vector<WeightSpec> specs, original_specs;
  const std::vector<float> converted =
      load(dir.path() / "hf", llama_config_from_hf(dir.path() / "hf" / "config.json"), specs);
  const std::vector<float> original = load(kFixtures / "tiny_llama", hf_config, original_specs);
  ASSERT_EQ(converted.size(), original.size());

  const json expected = json::parse(std::ifstream(kFixtures / "gguf" / "expected.json"));
  expect_as_gguf_py(specs, converted, original, expected.at("tensors"));

  // The embedded tokenizer: 94 printable bytes, Ġ for space, <|endoftext|> as BOS/EOS; digits
  // alone (tokenizer.ggml.pre smollm); bytes without a token (é) dropped.
  const auto tok = tokenizer::load_tokenizer((dir.path() / "hf" / "tokenizer.json").string());
  EXPECT_EQ(tok->vocab_size(), 96);
  EXPECT_EQ(tok->eos_id(), 95);
  EXPECT_EQ(tok->encode("a 12\xC3\xA9", true),
            (std::vector<int32_t>{95, 'a' - 33, 94, '1' - 33, '2' - 33}));
}

TEST(Gguf, DamagedFilesAreOneError) {
  io::TempDir dir;
  std::string bytes;
  {
    std::ifstream in(kGguf, std::ios::binary);
    bytes.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }
  const auto error_of = [&](const std::string& content) {
    const fs::path path = dir.path() / "damaged.gguf";
    std::ofstream(path, std::ios::binary) << content;
    try {
      write_hf_directory_from_gguf(io::GgufFile(path), dir.path() / "out");
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(error_of("GGML" + bytes.substr(4)).find("not a GGUF file (bad magic)"),
            std::string::npos);
  EXPECT_NE(error_of(bytes.substr(0, 200)).find("runs past the end of the file"),
            std::string::npos);
  EXPECT_NE(error_of(bytes.substr(0, bytes.size() - 100)).find("lies outside the file"),
            std::string::npos);
  // The first tensor's type field (after its name, dimension count and two dimensions) set to
  // Q5_0 (6), which maxctx does not read.
  const io::GgufFile file(kGguf);
  const std::string name = file.tensors().front().name;
  const size_t at = bytes.find(name) + name.size() + 4 + 2 * 8;
  std::string q5 = bytes;
  q5[at] = 6;
  EXPECT_NE(error_of(q5).find("is type 6; maxctx reads F32, F16, BF16, Q8_0, Q4_0 and Q4_1"),
            std::string::npos);
  // One layer more than the file holds: refused before the weight list is built.
  std::string more_layers = bytes;
  more_layers[more_layers.find("llama.block_count") + 17 + 4] = 3;
  EXPECT_NE(error_of(more_layers).find("the metadata describes"), std::string::npos)
      << error_of(more_layers);
  std::string other_arch = bytes;
  const size_t arch = other_arch.find("llama", other_arch.find("general.architecture"));
  other_arch.replace(arch, 5, "gemma");
  EXPECT_NE(error_of(other_arch).find("general.architecture 'gemma' is not supported"),
            std::string::npos);
}

// A Mixtral as llama.cpp's converter writes it (tools/reference/gguf_fixture.py from
// tests/fixtures/tiny_mixtral: experts stacked per layer in ffn_{gate,down,up}_exps, F32, F16 and
// Q8_0) becomes a MixtralConfig directory whose every expert equals gguf-py's dequantization of
// its slice, within its type's rounding of tiny_mixtral's own weights.
TEST(Gguf, MixtralExpertsLoad) {
  const io::GgufFile file(kFixtures / "gguf" / "tiny_mixtral.gguf");
  const LlamaConfig config = llama_config_from_gguf(file);
  const LlamaConfig hf_config = llama_config_from_hf(kFixtures / "tiny_mixtral" / "config.json");
  EXPECT_TRUE(config.moe);
  EXPECT_EQ(config.num_experts, 4);
  EXPECT_EQ(config.num_experts_per_tok, 2);
  EXPECT_EQ(config.num_parameters(), hf_config.num_parameters());
  EXPECT_EQ(config.rope.theta, 1e6);

  io::TempDir dir;
  const std::string what = write_hf_directory_from_gguf(file, dir.path() / "hf");
  // 41 Hugging Face tensors from 23 GGUF ones: each stacked expert tensor read once.
  EXPECT_NE(what.find("41 tensors (13 F16, 8 F32, 2 Q8_0)"), std::string::npos) << what;
  const LlamaConfig back = llama_config_from_hf(dir.path() / "hf" / "config.json");
  EXPECT_TRUE(back.moe);
  EXPECT_EQ(back.num_experts, 4);
  EXPECT_EQ(back.num_experts_per_tok, 2);
  std::vector<WeightSpec> specs, original_specs;
  const std::vector<float> converted = load(dir.path() / "hf", back, specs);
  const std::vector<float> original = load(kFixtures / "tiny_mixtral", hf_config, original_specs);
  const json expected = json::parse(std::ifstream(kFixtures / "gguf" / "expected.json"));
  expect_as_gguf_py(specs, converted, original, expected.at("tiny_mixtral"));

  // More experts per token than experts: one line naming both keys.
  std::string bytes = read_bytes(kFixtures / "gguf" / "tiny_mixtral.gguf");
  const std::string key = "llama.expert_used_count";
  bytes[bytes.find(key) + key.size() + 4] = 9;  // after the key, its uint32 type
  EXPECT_NE(conversion_error(dir, bytes)
                .find("llama.expert_used_count = 9 is more than "
                      "llama.expert_count = 4"),
            std::string::npos);
}

// Llama 3 RoPE scaling as the converter writes it (the divisors of rope_freqs.weight, no
// metadata) becomes rope_type llama3 whose frequencies are llama.cpp's: inv_freq_i divided by the
// file's divisor i. Divisors of another form, and other scaling types, are refused in one line.
TEST(Gguf, Llama3RopeScalingFromRopeFreqs) {
  const fs::path path = kFixtures / "gguf" / "tiny_llama_rope_llama3.gguf";
  const io::GgufFile file(path);
  const LlamaConfig config = llama_config_from_gguf(file);
  EXPECT_EQ(config.rope.scaling, kernels::RopeScaling::kLlama3);
  EXPECT_EQ(config.rope.factor, 8.0);
  EXPECT_EQ(config.rope.low_freq_factor, 1.0);
  EXPECT_EQ(config.rope.high_freq_factor, 4.0);
  EXPECT_EQ(config.rope.original_max_position_embeddings, 64.0);
  const json expected = json::parse(std::ifstream(kFixtures / "gguf" / "expected.json"));
  const std::vector<double> inv_freq = kernels::rope_inv_freq(config.rope, config.head_dim);
  ASSERT_EQ(inv_freq.size(), 4u);
  for (size_t i = 0; i < inv_freq.size(); ++i) {
    const double llama_cpp =
        std::pow(10000.0, -2.0 * double(i) / 8.0) / expected.at("rope_freqs")[i].get<double>();
    EXPECT_NEAR(inv_freq[i], llama_cpp, 1e-6 * llama_cpp) << i;
  }
  io::TempDir dir;
  write_hf_directory_from_gguf(file, dir.path() / "hf");
  const LlamaConfig back = llama_config_from_hf(dir.path() / "hf" / "config.json");
  EXPECT_EQ(back.rope.scaling, kernels::RopeScaling::kLlama3);
  EXPECT_EQ(back.rope.factor, 8.0);
  EXPECT_EQ(back.rope.original_max_position_embeddings, 64.0);

  const std::string bytes = read_bytes(path);
  const io::GgufTensor& freqs = *file.find("rope_freqs.weight");
  std::string other = bytes;
  const float divisors[4] = {1.0f, 2.0f, 3.0f, 5.0f};
  std::memcpy(other.data() + freqs.offset, divisors, sizeof(divisors));
  EXPECT_NE(
      conversion_error(dir, other)
          .find(
              "tensor rope_freqs.weight is not Llama 3 RoPE scaling (factor 5, low_freq_factor 1, "
              "high_freq_factor 4, any original context length)"),
      std::string::npos)
      << conversion_error(dir, other);
  std::string yarn = bytes;
  yarn.replace(yarn.find("none", yarn.find("llama.rope.scaling.type")), 4, "yarn");
  EXPECT_NE(conversion_error(dir, yarn).find(
                "GGUF RoPE scaling 'yarn' (llama.rope.scaling.type) is not supported"),
            std::string::npos);
}

// q8_0_as_int8_rows: a row whose blocks share one scale is maxctx's int8 as it is (codes and that
// scale); zero blocks fit any row (written as codes 0), a zero row has scale 0; differing scales
// within a row, or a code of -128, have no such form.
TEST(Gguf, Q8RowsAsInt8WhereTheRowsShareOneScale) {
  // Two rows of two 32-element blocks.
  std::vector<int8_t> codes(128);
  for (size_t i = 0; i < codes.size(); ++i) codes[i] = static_cast<int8_t>(int(i % 201) - 100);
  const std::vector<float> shared = {0.5f, 0.5f, 0.25f, 0.25f};
  std::optional<Int8Codes> rows = q8_0_as_int8_rows(codes, shared, 2, 64);
  ASSERT_TRUE(rows.has_value());
  EXPECT_EQ(rows->codes, codes);  // as stored, though no row reaches ±127
  EXPECT_EQ(rows->scales, (std::vector<float>{0.5f, 0.25f}));

  // Row 0's second block with scale 0 (its values are zeros whatever the codes), row 1 all zero.
  std::vector<int8_t> zeros = codes;
  std::fill(zeros.begin() + 64, zeros.end(), int8_t{0});
  rows = q8_0_as_int8_rows(zeros, std::vector<float>{0.5f, 0.0f, 0.25f, 0.75f}, 2, 64);
  ASSERT_TRUE(rows.has_value());
  EXPECT_TRUE(std::equal(codes.begin(), codes.begin() + 32, rows->codes.begin()));
  EXPECT_TRUE(
      std::all_of(rows->codes.begin() + 32, rows->codes.end(), [](int8_t q) { return q == 0; }));
  EXPECT_EQ(rows->scales, (std::vector<float>{0.5f, 0.0f}));

  EXPECT_FALSE(q8_0_as_int8_rows(codes, std::vector<float>{0.5f, 0.5f, 0.25f, 0.5f}, 2, 64));
  EXPECT_FALSE(q8_0_as_int8_rows(codes, std::vector<float>{-0.5f, -0.5f, 0.25f, 0.25f}, 2, 64));
  std::vector<int8_t> low = codes;
  low[70] = -128;
  EXPECT_FALSE(q8_0_as_int8_rows(low, shared, 2, 64));
}

// tiny_llama_q8_rows.gguf (tools/reference/gguf_fixture.py write_q8_rows, 64 wide: two blocks a
// row): 13 Q8_0 projections with one scale per row and 2 as ggml quantizes them (a scale per
// block). The int8 checkpoint holds the file's codes and scales for the 13 (Q/K rows unpermuted
// with their scales), exactly
// the dequantized F32 values; every one of those rows reaches ±127, so maxctx's rule on the
// dequantized values gives the same codes and scales (the checkpoint equals
// dequantize-then-quantize there, and decodes the same: quantized_checkpoint_test). The other 2 are
// the rule's codes of their dequantized values.
TEST(Gguf, Q8RowScalesBecomeInt8CodesAsStored) {
  const io::GgufFile file(kFixtures / "gguf" / "tiny_llama_q8_rows.gguf");
  const kernels::Kernels& cpu = kernels::backend(Device::kCpu);
  io::TempDir dir;
  const std::string what = write_int8_directory_from_gguf(cpu, file, dir.path() / "int8");
  EXPECT_NE(what.find("into an int8 checkpoint: 13 Q8_0 projections taken as stored (one scale per "
                      "row); 2 Q8_0 projections dequantized and quantized per row"),
            std::string::npos)
      << what;
  write_hf_directory_from_gguf(file, dir.path() / "f32");
  std::vector<WeightSpec> specs;
  const LlamaConfig config = llama_config_from_hf(dir.path() / "f32" / "config.json");
  const std::vector<float> f32 = load(dir.path() / "f32", config, specs);
  ASSERT_TRUE(is_int8_checkpoint(dir.path() / "int8"));
  const io::SafetensorsCheckpoint int8(dir.path() / "int8");
  int taken = 0;
  for (const WeightSpec& s : specs) {
    if (!int8_quantized(s)) continue;
    SCOPED_TRACE(s.name);
    const std::span<const std::byte> raw = int8.bytes(s.name);
    const std::vector<int8_t> codes(reinterpret_cast<const int8_t*>(raw.data()),
                                    reinterpret_cast<const int8_t*>(raw.data()) + raw.size());
    const std::vector<float> scales = int8.read_f32(s.name + "_scale", {s.rows});
    // The rule on the dequantized values.
    std::vector<int8_t> rule_codes(codes.size());
    std::vector<float> rule_scales(scales.size());
    cpu.quantize_rows_int8(
        TensorView(rule_codes.data(), DType::kI8, Shape{s.rows, s.cols}),
        TensorView(rule_scales.data(), DType::kF32, Shape{s.rows}),
        TensorView(const_cast<float*>(f32.data() + s.offset), DType::kF32, Shape{s.rows, s.cols}),
        kernels::kInt8Levels);
    EXPECT_EQ(codes, rule_codes);
    EXPECT_EQ(scales, rule_scales);
    const bool per_block =
        s.name.starts_with("model.layers.1.") && (s.name.find("q_proj") != std::string::npos ||
                                                  s.name.find("gate_proj") != std::string::npos);
    if (per_block) continue;
    ++taken;
    // Exactly the file's values, and (no permutation here) the file's codes and block scale.
    for (int64_t k = 0; k < s.numel(); ++k) {
      ASSERT_EQ(float(codes[k]) * scales[k / s.cols], f32[s.offset + k]) << k;
    }
    if (s.name == "model.layers.0.mlp.up_proj.weight") {
      const io::GgufFile::Q8Blocks stored = file.read_q8_0(*file.find("blk.0.ffn_up.weight"));
      EXPECT_EQ(codes, stored.codes);
      for (int64_t r = 0; r < s.rows; ++r)
        EXPECT_EQ(scales[r], stored.scales[r * s.cols / 32]) << r;
    }
  }
  EXPECT_EQ(taken, 13);
  const std::string error = [&] {
    try {
      file.read_q8_0(*file.find("token_embd.weight"));
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  }();
  EXPECT_NE(error.find("tensor 'token_embd.weight' is F16, not Q8_0"), std::string::npos) << error;
}

}  // namespace
}  // namespace maxctx::model

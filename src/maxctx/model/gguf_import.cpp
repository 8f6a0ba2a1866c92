#include "maxctx/model/gguf_import.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <numbers>
#include <optional>
#include <set>
#include <span>
#include <vector>

#include "maxctx/config/size_limits.h"
#include "maxctx/core/check.h"
#include "maxctx/model/hf_import.h"
#include "maxctx/model/quantized_checkpoint.h"
#include "maxctx/model/weights.h"

namespace maxctx::model {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

// Where a Hugging Face weight lies in a GGUF file (llama.cpp's tensor names for LLM_ARCH_LLAMA):
// a whole tensor, or (experts) one slice of a tensor that stacks every expert's.
struct GgufSource {
  std::string name;
  int64_t expert = -1;  // >= 0: slice `expert` of a [num_experts, rows, cols] tensor
};

GgufSource gguf_source(const io::GgufFile& f, const std::string& hf) {
  static const std::map<std::string, std::string> kGlobal = {
      {"model.embed_tokens.weight", "token_embd.weight"},
      {"model.norm.weight", "output_norm.weight"},
      {"lm_head.weight", "output.weight"}};
  if (const auto it = kGlobal.find(hf); it != kGlobal.end()) return {it->second};
  static const std::map<std::string, std::string> kLayer = {
      {"input_layernorm.weight", "attn_norm.weight"},
      {"self_attn.q_proj.weight", "attn_q.weight"},
      {"self_attn.k_proj.weight", "attn_k.weight"},
      {"self_attn.v_proj.weight", "attn_v.weight"},
      {"self_attn.o_proj.weight", "attn_output.weight"},
      {"post_attention_layernorm.weight", "ffn_norm.weight"},
      {"mlp.gate_proj.weight", "ffn_gate.weight"},
      {"mlp.up_proj.weight", "ffn_up.weight"},
      {"mlp.down_proj.weight", "ffn_down.weight"},
      {"block_sparse_moe.gate.weight", "ffn_gate_inp.weight"}};
  const std::string prefix = "model.layers.";
  const size_t dot = hf.find('.', prefix.size());
  MAXCTX_CHECK(hf.rfind(prefix, 0) == 0 && dot != std::string::npos, "weight name {}", hf);
  const std::string block = "blk." + hf.substr(prefix.size(), dot - prefix.size()) + ".";
  const std::string rest = hf.substr(dot + 1);
  if (const auto it = kLayer.find(rest); it != kLayer.end()) return {block + it->second};
  // block_sparse_moe.experts.<j>.<w1|w2|w3>.weight: llama.cpp stacks the experts into
  // ffn_{gate,down,up}_exps (convert_hf_to_gguf.py); older files keep ffn_{gate,down,up}.<j>.
  const std::string experts = "block_sparse_moe.experts.";
  MAXCTX_CHECK(rest.rfind(experts, 0) == 0, "weight name {}", hf);
  const size_t expert_dot = rest.find('.', experts.size());
  MAXCTX_CHECK(expert_dot != std::string::npos, "weight name {}", hf);
  const std::string expert = rest.substr(experts.size(), expert_dot - experts.size());
  static const std::map<std::string, std::string> kExpert = {
      {"w1.weight", "ffn_gate"}, {"w2.weight", "ffn_down"}, {"w3.weight", "ffn_up"}};
  const auto it = kExpert.find(rest.substr(expert_dot + 1));
  MAXCTX_CHECK(it != kExpert.end(), "weight name {}", hf);
  const std::string stacked = block + it->second + "_exps.weight";
  const std::string alone = block + it->second + "." + expert + ".weight";
  if (f.find(alone) != nullptr && f.find(stacked) == nullptr) return {alone};
  return {stacked, std::stoll(expert)};
}

// llama.cpp's converter interleaves each head's two RoPE halves (permute()): GGUF row 2i + j of
// a head is Hugging Face row j·D/2 + i. `rows` holds heads x D rows of `cols` values (values,
// int8 codes, or one scale per row with cols 1).
template <typename T>
std::vector<T> unpermute_heads(const std::vector<T>& gguf, int64_t heads, int64_t cols) {
  const int64_t rows = static_cast<int64_t>(gguf.size()) / cols;
  const int64_t d = rows / heads;
  std::vector<T> hf(gguf.size());
  for (int64_t h = 0; h < heads; ++h) {
    for (int64_t i = 0; i < d / 2; ++i) {
      for (int64_t j = 0; j < 2; ++j) {
        const int64_t from = h * d + 2 * i + j, to = h * d + j * (d / 2) + i;
        std::copy_n(gguf.begin() + from * cols, cols, hf.begin() + to * cols);
      }
    }
  }
  return hf;
}

// The embedded tokenizer as tokenizer.json (byte-level BPE: tokenizer.ggml.model "gpt2"), or an
// empty object when the file has none. The pre-tokenizer follows tokenizer.ggml.pre, as
// llama.cpp's llama-vocab does.
json tokenizer_json(const io::GgufFile& f) {
  if (!f.has("tokenizer.ggml.model")) return json();
  const std::string model = f.string("tokenizer.ggml.model");
  if (model != "gpt2") {
    fail(
        "{}: the embedded tokenizer is '{}'; maxctx converts byte-level BPE ('gpt2') tokenizers "
        "(give tokenizer_path for another)",
        f.path().string(), model);
  }
  const std::string pre = f.has("tokenizer.ggml.pre") ? f.string("tokenizer.ggml.pre") : "default";
  const auto byte_level = [](bool regex) {
    // Every field tokenizers' ByteLevel has: its loader refuses one without trim_offsets.
    return json{{"type", "ByteLevel"},
                {"add_prefix_space", false},
                {"trim_offsets", false},
                {"use_regex", regex}};
  };
  const auto split = [&](const char* regex) {
    return json{{"type", "Sequence"},
                {"pretokenizers",
                 {{{"type", "Split"},
                   {"pattern", {{"Regex", regex}}},
                   {"behavior", "Isolated"},
                   {"invert", false}},
                  byte_level(false)}}};
  };
  json pre_tokenizer;
  bool ignore_merges = false;
  if (pre == "default" || pre == "gpt-2") {
    pre_tokenizer = byte_level(true);
  } else if (pre == "smollm" || pre == "starcoder") {
    pre_tokenizer = {
        {"type", "Sequence"},
        {"pretokenizers", {{{"type", "Digits"}, {"individual_digits", true}}, byte_level(true)}}};
  } else if (pre == "llama-bpe" || pre == "llama3") {
    pre_tokenizer = split(
        R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)");
    ignore_merges = true;
  } else if (pre == "qwen2") {
    pre_tokenizer = split(
        R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)");
  } else {
    fail(
        "{}: tokenizer.ggml.pre '{}' is not one maxctx knows (default, gpt-2, smollm, starcoder, "
        "llama-bpe, qwen2)",
        f.path().string(), pre);
  }
  const std::vector<std::string> tokens = f.strings("tokenizer.ggml.tokens");
  const std::vector<std::string> merges = f.has("tokenizer.ggml.merges")
                                              ? f.strings("tokenizer.ggml.merges")
                                              : std::vector<std::string>();
  // GGUF strings are UTF-8, and so is tokenizer.json: a token that is not is refused here, not
  // when the JSON is written (nlohmann throws its own exception there).
  for (const auto* list : {&tokens, &merges}) {
    for (size_t i = 0; i < list->size(); ++i) {
      try {
        (void)json((*list)[i]).dump();
      } catch (const json::exception&) {
        fail("{}: {} {} of the embedded tokenizer is not valid UTF-8", f.path().string(),
             list == &tokens ? "token" : "merge", i);
      }
    }
  }
  const std::vector<int64_t> types = f.has("tokenizer.ggml.token_type")
                                         ? f.integers("tokenizer.ggml.token_type")
                                         : std::vector<int64_t>(tokens.size(), 1);
  if (types.size() != tokens.size()) {
    fail("{}: {} token types for {} tokens", f.path().string(), types.size(), tokens.size());
  }
  json vocab = json::object();
  json added = json::array();
  for (size_t id = 0; id < tokens.size(); ++id) {
    // Every token in the vocabulary, as Hugging Face's files have them (transformers renumbers
    // special tokens it does not find there); llama.cpp's token types 3 (control: special) and
    // 4 (user-defined: added, not special) are added tokens too.
    vocab[tokens[id]] = id;
    if (types[id] == 3 || types[id] == 4) {
      added.push_back({{"id", id},
                       {"content", tokens[id]},
                       {"special", types[id] == 3},
                       {"single_word", false},
                       {"lstrip", false},
                       {"rstrip", false},
                       {"normalized", false}});
    }
  }
  return {{"version", "1.0"},
          {"added_tokens", added},
          {"normalizer", nullptr},
          {"pre_tokenizer", pre_tokenizer},
          {"decoder", byte_level(true)},
          {"model",
           {{"type", "BPE"},
            {"ignore_merges", ignore_merges},
            {"vocab", vocab},
            {"merges", json(merges)}}}};
}

}  // namespace

namespace {

// A dimension from the metadata within [lo, hi] (config/size_limits.h: the weight list's sizes
// cannot overflow).
int64_t dimension(const io::GgufFile& f, const std::string& key, int64_t lo,
                  int64_t hi = limits::kMaxInt32) {
  const int64_t value = f.integer(key);
  if (value < lo || value > hi) {
    fail("{}: GGUF metadata '{}' = {} is out of range [{}, {}]", f.path().string(), key, value, lo,
         hi);
  }
  return value;
}

// Llama 3 RoPE scaling from the tensor llama.cpp's converter writes for it: rope_freqs.weight
// holds a divisor per frequency (inv_freq_i / rope_freqs_i is the scaled frequency), computed from
// the Hugging Face rope_scaling {factor, low_freq_factor, high_freq_factor,
// original_max_position_embeddings}, which the file does not keep. They are recovered as Llama
// 3.x sets them: the factor is the largest divisor, low_freq_factor 1, high_freq_factor 4, the
// original context length from a divisor between 1 and the factor (else
// llama.rope.scaling.original_context_length, else 8192), and accepted only if maxctx's Llama 3
// frequencies with them reproduce every divisor; any other per-frequency scaling is refused.
kernels::RopeParams rope_from_freqs(const io::GgufFile& f, const io::GgufTensor& t, double theta,
                                    int64_t head_dim) {
  const std::string path = f.path().string();
  if (t.shape != std::vector<int64_t>{head_dim / 2}) {
    fail("{}: tensor rope_freqs.weight has shape [{}], expected [{}] (head_dim / 2)", path,
         fmt::join(t.shape, ", "), head_dim / 2);
  }
  const std::vector<float> divisors = f.read_f32(t);
  kernels::RopeParams rope;
  rope.theta = theta;
  const std::vector<double> plain = kernels::rope_inv_freq(rope, head_dim);
  double factor = 0.0;
  for (const float d : divisors) {
    if (!(d > 0.0f && std::isfinite(d))) {
      fail("{}: tensor rope_freqs.weight holds {}, not a positive frequency divisor", path, d);
    }
    factor = std::max(factor, double{d});
  }
  if (factor == 1.0 &&
      std::all_of(divisors.begin(), divisors.end(), [](float d) { return d == 1.0f; })) {
    return rope;  // every divisor 1: no scaling
  }
  std::vector<double> original_lengths;
  for (size_t i = 0; i < divisors.size(); ++i) {
    const double d = divisors[i];
    if (d > 1.0 + 1e-6 && d < factor * (1.0 - 1e-6) && factor > 1.0) {
      // d = 1 / ((1 - s) / factor + s), s = (original / wavelength - low) / (high - low).
      const double smooth = (1.0 / d - 1.0 / factor) / (1.0 - 1.0 / factor);
      const double wavelength = 2.0 * std::numbers::pi / plain[i];
      original_lengths.push_back(std::round(wavelength * (3.0 * smooth + 1.0)));
      break;
    }
  }
  if (f.has("llama.rope.scaling.original_context_length")) {
    original_lengths.push_back(
        static_cast<double>(dimension(f, "llama.rope.scaling.original_context_length", 1)));
  }
  original_lengths.push_back(8192.0);
  for (const double original : original_lengths) {
    if (!(original >= 1.0)) continue;
    kernels::RopeParams llama3 = rope;
    llama3.scaling = kernels::RopeScaling::kLlama3;
    llama3.factor = factor;
    llama3.low_freq_factor = 1.0;
    llama3.high_freq_factor = 4.0;
    llama3.original_max_position_embeddings = original;
    const std::vector<double> scaled = kernels::rope_inv_freq(llama3, head_dim);
    bool same = true;
    for (size_t i = 0; i < divisors.size() && same; ++i) {
      const double want = plain[i] / double{divisors[i]};
      same = std::fabs(scaled[i] - want) <= 1e-5 * want;
    }
    if (same) return llama3;
  }
  fail(
      "{}: tensor rope_freqs.weight is not Llama 3 RoPE scaling (factor {}, low_freq_factor 1, "
      "high_freq_factor 4, any original context length); maxctx reads no other per-frequency "
      "RoPE scaling from GGUF",
      path, factor);
}

}  // namespace

LlamaConfig llama_config_from_gguf(const io::GgufFile& f) {
  const std::string path = f.path().string();
  const std::string arch = f.string("general.architecture");
  if (arch != "llama") {
    fail("{}: general.architecture '{}' is not supported; maxctx reads 'llama' GGUF files", path,
         arch);
  }
  LlamaConfig m;
  m.emb_dim = dimension(f, "llama.embedding_length", 1, limits::kMaxWidth);
  m.mlp_dim = dimension(f, "llama.feed_forward_length", 1, limits::kMaxWidth);
  m.num_layers = dimension(f, "llama.block_count", 1, limits::kMaxLayers);
  m.num_query_heads = dimension(f, "llama.attention.head_count", 1, limits::kMaxHeads);
  m.num_kv_heads = f.has("llama.attention.head_count_kv")
                       ? dimension(f, "llama.attention.head_count_kv", 1, limits::kMaxHeads)
                       : m.num_query_heads;
  m.head_dim = f.has("llama.attention.key_length")
                   ? dimension(f, "llama.attention.key_length", 2, limits::kMaxHeadDim)
                   : m.emb_dim / m.num_query_heads;
  if (m.head_dim % 2 != 0 || m.head_dim == 0 || m.num_query_heads % m.num_kv_heads != 0) {
    fail(
        "{}: {} heads of {} over {} kv heads: RoPE needs an even head_dim and the query heads a "
        "whole number per kv head",
        path, m.num_query_heads, m.head_dim, m.num_kv_heads);
  }
  for (const char* key : {"llama.attention.value_length", "llama.rope.dimension_count"}) {
    if (f.has(key) && f.integer(key) != m.head_dim) {
      fail(
          "{}: GGUF metadata '{}' = {} differs from head_dim {} (partial RoPE and other value "
          "widths are not supported)",
          path, key, f.integer(key), m.head_dim);
    }
  }
  const double eps = f.number("llama.attention.layer_norm_rms_epsilon");
  if (!(eps > 0.0 && eps < 1.0)) {
    fail("{}: llama.attention.layer_norm_rms_epsilon = {} is not in (0, 1)", path, eps);
  }
  m.norm_eps = static_cast<float>(eps);
  m.rope.theta = f.has("llama.rope.freq_base") ? f.number("llama.rope.freq_base") : 10000.0;
  if (!(m.rope.theta > 1.0 && std::isfinite(m.rope.theta))) {
    fail("{}: llama.rope.freq_base = {} must be a finite number above 1", path, m.rope.theta);
  }
  if (f.has("llama.rope.scaling.type") && f.string("llama.rope.scaling.type") != "none") {
    fail(
        "{}: GGUF RoPE scaling '{}' (llama.rope.scaling.type) is not supported; maxctx reads "
        "Llama 3 scaling, which GGUF files carry as the tensor rope_freqs.weight",
        path, f.string("llama.rope.scaling.type"));
  }
  if (const io::GgufTensor* freqs = f.find("rope_freqs.weight")) {
    m.rope = rope_from_freqs(f, *freqs, m.rope.theta, m.head_dim);
  }
  // Mixtral: llama's MoE form (softmax over the router logits, the top expert_used_count renormed
  // = Hugging Face Mixtral's routing), experts as wide as feed_forward_length.
  const int64_t experts = f.has("llama.expert_count") ? dimension(f, "llama.expert_count", 0) : 0;
  if (experts > 0) {
    m.moe = true;
    m.num_experts = experts;
    if (experts > limits::kMaxExperts) {
      fail("{}: llama.expert_count = {} is more than {}", path, experts, limits::kMaxExperts);
    }
    m.num_experts_per_tok = dimension(f, "llama.expert_used_count", 1);
    if (m.num_experts_per_tok > experts) {
      fail("{}: llama.expert_used_count = {} is more than llama.expert_count = {}", path,
           m.num_experts_per_tok, experts);
    }
    if (f.has("llama.expert_feed_forward_length") &&
        f.integer("llama.expert_feed_forward_length") != m.mlp_dim) {
      fail(
          "{}: llama.expert_feed_forward_length {} differs from feed_forward_length {}; maxctx's "
          "experts are as wide as the feed-forward",
          path, f.integer("llama.expert_feed_forward_length"), m.mlp_dim);
    }
  }
  for (const char* key : {"llama.expert_shared_count", "llama.expert_weights_scale"}) {
    if (f.has(key))
      fail("{}: GGUF metadata '{}' is not supported (Mixtral-style experts only)", path, key);
  }
  const io::GgufTensor* embed = f.find("token_embd.weight");
  if (embed == nullptr) fail("{}: no tensor token_embd.weight", path);
  if (embed->shape.size() != 2 || embed->shape[1] != m.emb_dim) {
    fail("{}: tensor token_embd.weight has shape [{}], expected [vocab, {}]", path,
         fmt::join(embed->shape, ", "), m.emb_dim);
  }
  m.vocab_size = embed->shape[0];
  m.tie_embeddings = f.find("output.weight") == nullptr;
  // Every weight is an element of some tensor of the file: a model the metadata makes larger
  // than that is refused before its weight list (one entry per tensor) is built.
  double elements = 0.0;
  for (const io::GgufTensor& t : f.tensors()) elements += static_cast<double>(t.numel());
  if (parameter_count<double>(m) > elements) {
    fail("{}: the metadata describes {:.4g} parameters, the file's tensors hold {:.4g}", path,
         parameter_count<double>(m), elements);
  }
  return m;
}

std::optional<Int8Codes> q8_0_as_int8_rows(std::span<const int8_t> codes,
                                           std::span<const float> scales, int64_t rows,
                                           int64_t cols) {
  constexpr int64_t kBlock = 32;
  MAXCTX_CHECK(cols % kBlock == 0 && static_cast<int64_t>(codes.size()) == rows * cols &&
                   static_cast<int64_t>(scales.size()) == rows * cols / kBlock,
               "Q8_0 blocks for ({}, {})", rows, cols);
  Int8Codes out{std::vector<int8_t>(codes.begin(), codes.end()),
                std::vector<float>(static_cast<size_t>(rows), 0.0f)};
  for (int64_t r = 0; r < rows; ++r) {
    float& row_scale = out.scales[static_cast<size_t>(r)];
    for (int64_t b = r * cols / kBlock; b < (r + 1) * cols / kBlock; ++b) {
      int8_t* block = out.codes.data() + b * kBlock;
      const float d = scales[static_cast<size_t>(b)];
      const bool zero =
          d == 0.0f || std::all_of(block, block + kBlock, [](int8_t q) { return q == 0; });
      if (zero) {
        std::fill_n(block, kBlock, int8_t{0});  // zeros whatever its scale
        continue;
      }
      // -128 is outside maxctx's codes; a non-positive or non-finite scale is not the rule's.
      if (!(d > 0.0f && std::isfinite(d)) ||
          std::any_of(block, block + kBlock, [](int8_t q) { return q == -128; })) {
        return std::nullopt;
      }
      if (row_scale == 0.0f) row_scale = d;
      if (d != row_scale) return std::nullopt;
    }
  }
  return out;
}

namespace {

// The model's weights read from a GGUF file: every tensor dequantized to F32 in Hugging Face row
// order and, when `int8_rows` is set, the Q8_0 projections that q8_0_as_int8_rows takes as stored.
struct GgufWeights {
  LlamaConfig config;
  std::vector<WeightSpec> specs;
  std::vector<float> flat;
  std::map<std::string, int> types;  // GGUF tensors read, per type
  GivenInt8 int8;
  int64_t q8_dequantized = 0;  // Q8_0 projections whose rows' block scales differ
};

GgufWeights read_gguf_weights(const io::GgufFile& f, bool int8_rows) {
  GgufWeights w;
  const LlamaConfig& m = w.config = llama_config_from_gguf(f);
  const std::vector<WeightSpec>& specs = w.specs = llama_weight_specs(m);
  // Every tensor found with its shape before anything is allocated: the sizes come from the
  // metadata, the tensors' from the file.
  std::vector<std::pair<const io::GgufTensor*, int64_t>> sources;
  for (const WeightSpec& s : specs) {
    const GgufSource source = gguf_source(f, s.name);
    const io::GgufTensor* t = f.find(source.name);
    if (t == nullptr) {
      fail("{}: no tensor {} (the model's {})", f.path().string(), source.name, s.name);
    }
    std::vector<int64_t> shape = s.global_cols == 1
                                     ? std::vector<int64_t>{s.global_rows}
                                     : std::vector<int64_t>{s.global_rows, s.global_cols};
    if (source.expert >= 0) shape.insert(shape.begin(), m.num_experts);
    if (t->shape != shape) {
      fail("{}: tensor {} has shape [{}], the config's model expects [{}]", f.path().string(),
           source.name, fmt::join(t->shape, ", "), fmt::join(shape, ", "));
    }
    sources.emplace_back(t, source.expert);
  }
  w.flat.resize(static_cast<size_t>(total_numel(specs)));
  // A layer's stacked expert tensors, each read once (the specs list a layer's experts together,
  // each expert's w1, w3, w2 in turn).
  std::map<const io::GgufTensor*, std::vector<float>> stacked;
  std::map<const io::GgufTensor*, io::GgufFile::Q8Blocks> stacked_q8;
  for (size_t i = 0; i < specs.size(); ++i) {
    const WeightSpec& s = specs[i];
    const auto [t, expert] = sources[i];
    std::vector<float> values;
    if (expert >= 0) {
      auto it = stacked.find(t);
      if (it == stacked.end()) {
        it = stacked.emplace(t, f.read_f32(*t)).first;
        ++w.types[io::ggml_type_name(t->type)];
      }
      const auto begin = it->second.begin() + expert * s.numel();
      values.assign(begin, begin + s.numel());
    } else {
      stacked.clear();  // the next layer's, or none
      stacked_q8.clear();
      values = f.read_f32(*t);
      ++w.types[io::ggml_type_name(t->type)];
    }
    const bool q = t->name.ends_with("attn_q.weight"), k = t->name.ends_with("attn_k.weight");
    const int64_t heads = q ? m.num_query_heads : m.num_kv_heads;
    if (q || k) values = unpermute_heads(values, heads, s.global_cols);
    std::copy(values.begin(), values.end(), w.flat.begin() + s.offset);
    if (!int8_rows || !int8_quantized(s) || t->type != static_cast<uint32_t>(io::GgmlType::kQ8_0)) {
      continue;
    }
    auto it = stacked_q8.find(t);
    if (it == stacked_q8.end()) it = stacked_q8.emplace(t, f.read_q8_0(*t)).first;
    const int64_t first = std::max<int64_t>(expert, 0) * s.numel();
    std::optional<Int8Codes> rows = q8_0_as_int8_rows(
        std::span(it->second.codes)
            .subspan(static_cast<size_t>(first), static_cast<size_t>(s.numel())),
        std::span(it->second.scales)
            .subspan(static_cast<size_t>(first / 32), static_cast<size_t>(s.numel() / 32)),
        s.global_rows, s.global_cols);
    if (!rows) {
      ++w.q8_dequantized;
      continue;
    }
    if (q || k) {
      rows->codes = unpermute_heads(rows->codes, heads, s.global_cols);
      rows->scales = unpermute_heads(rows->scales, heads, 1);
    }
    w.int8.emplace(s.name, std::move(*rows));
  }
  return w;
}

// config.json (and, with an embedded byte-level tokenizer, tokenizer.json and
// tokenizer_config.json) for `m` into `out`; returns what it says of the tokenizer.
std::string write_config_and_tokenizer(const io::GgufFile& f, const LlamaConfig& m,
                                       const fs::path& out) {
  fs::create_directories(out);
  json config = {{"architectures", {m.moe ? "MixtralForCausalLM" : "LlamaForCausalLM"}},
                 {"model_type", m.moe ? "mixtral" : "llama"},
                 {"hidden_size", m.emb_dim},
                 {"intermediate_size", m.mlp_dim},
                 {"num_attention_heads", m.num_query_heads},
                 {"num_key_value_heads", m.num_kv_heads},
                 {"head_dim", m.head_dim},
                 {"num_hidden_layers", m.num_layers},
                 {"vocab_size", m.vocab_size},
                 {"rms_norm_eps", f.number("llama.attention.layer_norm_rms_epsilon")},
                 {"rope_parameters", {{"rope_type", "default"}, {"rope_theta", m.rope.theta}}},
                 {"tie_word_embeddings", m.tie_embeddings},
                 {"hidden_act", "silu"},
                 {"dtype", "float32"}};
  if (m.rope.scaling == kernels::RopeScaling::kLlama3) {
    config["rope_parameters"] = {{"rope_type", "llama3"},
                                 {"rope_theta", m.rope.theta},
                                 {"factor", m.rope.factor},
                                 {"low_freq_factor", m.rope.low_freq_factor},
                                 {"high_freq_factor", m.rope.high_freq_factor},
                                 {"original_max_position_embeddings",
                                  static_cast<int64_t>(m.rope.original_max_position_embeddings)}};
  }
  if (m.moe) {
    config["num_local_experts"] = m.num_experts;
    config["num_experts_per_tok"] = m.num_experts_per_tok;
    config["router_jitter_noise"] = 0.0;
  }
  if (f.has("llama.context_length")) {
    config["max_position_embeddings"] = f.integer("llama.context_length");
  }
  const json tokenizer = tokenizer_json(f);
  if (!tokenizer.is_null()) {
    for (const char* key : {"bos_token_id", "eos_token_id"}) {
      const std::string gguf_key = std::string("tokenizer.ggml.") + key;
      if (f.has(gguf_key)) config[key] = f.integer(gguf_key);
    }
  }
  std::ofstream(out / "config.json") << config.dump(2) << "\n";
  std::string tokenizer_note = ", no embedded tokenizer";
  if (!tokenizer.is_null()) {
    std::ofstream(out / "tokenizer.json") << tokenizer.dump() << "\n";
    const std::vector<std::string> tokens = f.strings("tokenizer.ggml.tokens");
    json tokenizer_config = json::object();
    for (const auto& [gguf_key, key] : {std::pair{"tokenizer.ggml.bos_token_id", "bos_token"},
                                        std::pair{"tokenizer.ggml.eos_token_id", "eos_token"}}) {
      if (!f.has(gguf_key)) continue;
      const int64_t id = f.integer(gguf_key);
      if (id < 0 || id >= static_cast<int64_t>(tokens.size())) {
        fail("{}: {} = {} is not a token", f.path().string(), gguf_key, id);
      }
      tokenizer_config[key] = tokens[static_cast<size_t>(id)];
    }
    std::ofstream(out / "tokenizer_config.json") << tokenizer_config.dump(2) << "\n";
    tokenizer_note = fmt::format(", tokenizer.json ({} tokens)", tokens.size());
  }
  return tokenizer_note;
}

std::string type_counts(const std::map<std::string, int>& types) {
  std::vector<std::string> counts;
  for (const auto& [type, n] : types) counts.push_back(fmt::format("{} {}", n, type));
  return fmt::format("{}", fmt::join(counts, ", "));
}

}  // namespace

std::string write_hf_directory_from_gguf(const io::GgufFile& f, const fs::path& out) {
  const GgufWeights w = read_gguf_weights(f, false);
  const std::string tokenizer_note = write_config_and_tokenizer(f, w.config, out);
  save_hf_weights(w.specs, w.flat.data(), out / "model.safetensors");
  return fmt::format("{} tensors ({}) dequantized to F32{}", w.specs.size(), type_counts(w.types),
                     tokenizer_note);
}

std::string write_int8_directory_from_gguf(const kernels::Kernels& kernels, const io::GgufFile& f,
                                           const fs::path& out) {
  const GgufWeights w = read_gguf_weights(f, true);
  const std::string tokenizer_note = write_config_and_tokenizer(f, w.config, out);
  write_int8_checkpoint(kernels, w.specs, w.flat.data(), out, w.int8);
  std::string note = fmt::format(
      "{} tensors ({}) into an int8 checkpoint: {} Q8_0 projections "
      "taken as stored (one scale per row)",
      w.specs.size(), type_counts(w.types), w.int8.size());
  if (w.q8_dequantized > 0) {
    note += fmt::format(
        "; {} Q8_0 projections dequantized and quantized per row (their blocks' "
        "scales differ within a row)",
        w.q8_dequantized);
  }
  return note + tokenizer_note;
}

}  // namespace maxctx::model

#include "maxctx/model/gguf_import.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <vector>

#include "maxctx/core/check.h"
#include "maxctx/model/hf_import.h"
#include "maxctx/model/weights.h"

namespace maxctx::model {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

// The GGUF name of a Hugging Face weight name (llama.cpp's tensor names for LLM_ARCH_LLAMA).
std::string gguf_name(const std::string& hf) {
  static const std::map<std::string, std::string> kGlobal = {
      {"model.embed_tokens.weight", "token_embd.weight"},
      {"model.norm.weight", "output_norm.weight"},
      {"lm_head.weight", "output.weight"}};
  if (const auto it = kGlobal.find(hf); it != kGlobal.end()) return it->second;
  static const std::map<std::string, std::string> kLayer = {
      {"input_layernorm.weight", "attn_norm.weight"},
      {"self_attn.q_proj.weight", "attn_q.weight"},
      {"self_attn.k_proj.weight", "attn_k.weight"},
      {"self_attn.v_proj.weight", "attn_v.weight"},
      {"self_attn.o_proj.weight", "attn_output.weight"},
      {"post_attention_layernorm.weight", "ffn_norm.weight"},
      {"mlp.gate_proj.weight", "ffn_gate.weight"},
      {"mlp.up_proj.weight", "ffn_up.weight"},
      {"mlp.down_proj.weight", "ffn_down.weight"}};
  const std::string prefix = "model.layers.";
  const size_t dot = hf.find('.', prefix.size());
  MAXCTX_CHECK(hf.rfind(prefix, 0) == 0 && dot != std::string::npos, "weight name {}", hf);
  const auto it = kLayer.find(hf.substr(dot + 1));
  MAXCTX_CHECK(it != kLayer.end(), "weight name {}", hf);
  return "blk." + hf.substr(prefix.size(), dot - prefix.size()) + "." + it->second;
}

// llama.cpp's converter interleaves each head's two RoPE halves (permute()): GGUF row 2i + j of
// a head is Hugging Face row j·D/2 + i. `rows` holds heads x D rows of `cols` values.
std::vector<float> unpermute_heads(const std::vector<float>& gguf, int64_t heads, int64_t cols) {
  const int64_t rows = static_cast<int64_t>(gguf.size()) / cols;
  const int64_t d = rows / heads;
  std::vector<float> hf(gguf.size());
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
            {"merges", f.has("tokenizer.ggml.merges") ? json(f.strings("tokenizer.ggml.merges"))
                                                      : json::array()}}}};
}

}  // namespace

LlamaConfig llama_config_from_gguf(const io::GgufFile& f) {
  const std::string path = f.path().string();
  const std::string arch = f.string("general.architecture");
  if (arch != "llama") {
    fail("{}: general.architecture '{}' is not supported; maxctx reads 'llama' GGUF files", path,
         arch);
  }
  for (const char* key : {"llama.expert_count", "llama.rope.scaling.type"}) {
    if (f.has(key) && !(std::string(key) == "llama.rope.scaling.type" && f.string(key) == "none") &&
        !(std::string(key) == "llama.expert_count" && f.integer(key) == 0)) {
      fail(
          "{}: GGUF metadata '{}' is not supported (experts and RoPE scaling are not read from "
          "GGUF yet; convert the Hugging Face checkpoint instead)",
          path, key);
    }
  }
  if (f.find("rope_freqs.weight") != nullptr) {
    fail("{}: tensor rope_freqs.weight (llama3 RoPE scaling) is not supported in GGUF files yet",
         path);
  }
  LlamaConfig m;
  m.emb_dim = f.integer("llama.embedding_length");
  m.mlp_dim = f.integer("llama.feed_forward_length");
  m.num_layers = f.integer("llama.block_count");
  m.num_query_heads = f.integer("llama.attention.head_count");
  m.num_kv_heads = f.has("llama.attention.head_count_kv")
                       ? f.integer("llama.attention.head_count_kv")
                       : m.num_query_heads;
  if (m.num_query_heads <= 0 || m.num_kv_heads <= 0 || m.emb_dim <= 0) {
    fail("{}: {} heads, {} kv heads, width {}", path, m.num_query_heads, m.num_kv_heads, m.emb_dim);
  }
  m.head_dim = f.has("llama.attention.key_length") ? f.integer("llama.attention.key_length")
                                                   : m.emb_dim / m.num_query_heads;
  m.norm_eps = static_cast<float>(f.number("llama.attention.layer_norm_rms_epsilon"));
  m.rope.theta = f.has("llama.rope.freq_base") ? f.number("llama.rope.freq_base") : 10000.0;
  const io::GgufTensor* embed = f.find("token_embd.weight");
  if (embed == nullptr) fail("{}: no tensor token_embd.weight", path);
  m.vocab_size = embed->shape[0];
  m.tie_embeddings = f.find("output.weight") == nullptr;
  return m;
}

std::string write_hf_directory_from_gguf(const io::GgufFile& f, const fs::path& out) {
  const LlamaConfig m = llama_config_from_gguf(f);
  const std::vector<WeightSpec> specs = llama_weight_specs(m);
  std::vector<float> flat(static_cast<size_t>(total_numel(specs)));
  std::map<std::string, int> types;
  for (const WeightSpec& s : specs) {
    const std::string name = gguf_name(s.name);
    const io::GgufTensor* t = f.find(name);
    if (t == nullptr) fail("{}: no tensor {} (the model's {})", f.path().string(), name, s.name);
    const std::vector<int64_t> shape = s.global_cols == 1
                                           ? std::vector<int64_t>{s.global_rows}
                                           : std::vector<int64_t>{s.global_rows, s.global_cols};
    if (t->shape != shape) {
      fail("{}: tensor {} has shape [{}], the config's model expects [{}]", f.path().string(), name,
           fmt::join(t->shape, ", "), fmt::join(shape, ", "));
    }
    std::vector<float> values = f.read_f32(*t);
    if (name.ends_with("attn_q.weight")) {
      values = unpermute_heads(values, m.num_query_heads, s.global_cols);
    } else if (name.ends_with("attn_k.weight")) {
      values = unpermute_heads(values, m.num_kv_heads, s.global_cols);
    }
    std::copy(values.begin(), values.end(), flat.begin() + s.offset);
    ++types[io::ggml_type_name(t->type)];
  }
  fs::create_directories(out);
  json config = {{"architectures", {"LlamaForCausalLM"}},
                 {"model_type", "llama"},
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
  save_hf_weights(specs, flat.data(), out / "model.safetensors");
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
  std::vector<std::string> counts;
  for (const auto& [type, n] : types) counts.push_back(fmt::format("{} {}", n, type));
  return fmt::format("{} tensors ({}) dequantized to F32{}", specs.size(), fmt::join(counts, ", "),
                     tokenizer_note);
}

}  // namespace maxctx::model

#include "maxctx/model/hf_import.h"

#include <fmt/format.h>

#include <cmath>
#include <iterator>
#include <limits>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <type_traits>

#include "maxctx/config/size_limits.h"
#include "maxctx/core/check.h"
#include "maxctx/core/finite.h"
#include "maxctx/core/input_file.h"
#include "maxctx/core/json_checks.h"
#include "maxctx/core/log.h"
#include "maxctx/io/safetensors.h"
#include "maxctx/io/sliced_tensors.h"

namespace maxctx::model {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

// Fields with no effect on the math: bookkeeping, token ids, generation defaults and output
// switches. transformers < 4.56 writes `torch_dtype`, later ones `dtype`; a config saved with
// use_diff=False carries PretrainedConfig's whole list (id2label, num_beams, ...); SmolLM2-style
// files add is_llama_config and transformers.js_config. The few bookkeeping fields that would
// change the model (cross-attention, pruned heads, interleaved RoPE) must hold their defaults
// (require_value below).
const std::set<std::string> kIgnoredFields = {
    // identity and bookkeeping
    "architectures", "model_type", "torch_dtype", "dtype", "transformers_version", "_name_or_path",
    "tokenizer_class", "finetuning_task", "task_specific_params", "prefix", "is_llama_config",
    "transformers.js_config", "torchscript", "tf_legacy_loss", "use_bfloat16", "initializer_range",
    "max_position_embeddings", "problem_type", "id2label", "label2id", "is_decoder",
    "is_encoder_decoder", "cross_attention_hidden_size", "chunk_size_feed_forward",
    // checked below: must hold the value maxctx implements
    "hidden_act", "attention_bias", "mlp_bias", "pretraining_tp", "rope_interleaved",
    "add_cross_attention", "tie_encoder_decoder", "pruned_heads",
    // token ids
    "bos_token_id", "eos_token_id", "pad_token_id", "unk_token_id", "sep_token_id",
    "decoder_start_token_id", "forced_bos_token_id", "forced_eos_token_id",
    // outputs, caching and training-only switches
    "use_cache", "attention_dropout", "output_attentions", "output_hidden_states", "return_dict",
    // generation defaults (transformers 4.x kept them in the model config)
    "max_length", "min_length", "do_sample", "early_stopping", "num_beams", "num_beam_groups",
    "diversity_penalty", "temperature", "top_k", "top_p", "typical_p", "repetition_penalty",
    "length_penalty", "no_repeat_ngram_size", "encoder_no_repeat_ngram_size", "bad_words_ids",
    "num_return_sequences", "output_scores", "return_dict_in_generate", "remove_invalid_values",
    "exponential_decay_length_penalty", "suppress_tokens", "begin_suppress_tokens"};
const std::set<std::string> kMappedFields = {
    "hidden_size",   "intermediate_size", "num_attention_heads", "num_key_value_heads",
    "head_dim",      "num_hidden_layers", "vocab_size",          "rms_norm_eps",
    "rope_theta",    "rope_scaling",      "rope_parameters",     "tie_word_embeddings",
    "sliding_window"};
// MixtralConfig's own fields: its experts (mapped), and the router's training-time settings
// (router_aux_loss_coef, output_router_logits: maxctx uses load_balance_loss_weight instead;
// router_jitter_noise must be 0).
const std::set<std::string> kMixtralFields = {"num_local_experts", "num_experts_per_tok",
                                              "router_aux_loss_coef", "output_router_logits",
                                              "router_jitter_noise"};

// A value of an untrusted file for an error line: scalars as written (cut to 40 characters),
// containers by their type only, so that a deeply nested value is never walked.
std::string shown(const json& value) {
  if (value.is_structured()) return fmt::format("<{}>", value.type_name());
  std::string text = value.dump();
  if (text.size() > 40) text = text.substr(0, 40) + "...";
  return text;
}

template <typename T>
T field(const json& config, const char* name, const fs::path& path) {
  if (!config.contains(name)) fail("{}: config.json has no '{}'", path.string(), name);
  if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>) {
    // A count or size is a whole number in range: 32.9 or 2^32 + 2 is the file's error, not
    // 32 or 2.
    const json& value = config.at(name);
    const bool in_range =
        value.is_number_integer() &&
        !(value.is_number_unsigned() &&
          value.get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<T>::max())) &&
        (value.is_number_unsigned() || (value.get<int64_t>() >= std::numeric_limits<T>::min() &&
                                        value.get<int64_t>() <= std::numeric_limits<T>::max()));
    if (!in_range) {
      fail("{}: config.json field '{}' = {} must be a whole number in [{}, {}]", path.string(),
           name, shown(value), std::numeric_limits<T>::min(), std::numeric_limits<T>::max());
    }
  }
  try {
    return config.at(name).get<T>();
  } catch (const json::exception&) {
    fail("{}: config.json field '{}' has the wrong type ({})", path.string(), name,
         shown(config.at(name)));
  }
}

void require_value(const json& config, const char* name, const json& allowed,
                   const fs::path& path) {
  if (config.contains(name) && config.at(name) != allowed) {
    fail("{}: config.json '{}' = {} is not supported; maxctx implements {}", path.string(), name,
         shown(config.at(name)), allowed.dump());
  }
}

// RoPE of every vintage: transformers 4.x writes `rope_theta` and `rope_scaling` (null, or
// {rope_type or type, factor, ...}); 5.x writes `rope_parameters` {rope_theta, rope_type, ...}.
// A file may hold both (a 4.x config re-saved by hand): what both state must agree. rope_type
// "default" is plain RoPE; "llama3" is the one scaling maxctx implements; any other type, or a
// field of the scaling this mapping does not know, is refused by name.
kernels::RopeParams rope_from_json(const json& config, const fs::path& path) {
  kernels::RopeParams rope;
  const auto present = [&](const char* name) {
    return config.contains(name) && !config.at(name).is_null();
  };
  std::optional<double> theta;
  if (present("rope_theta")) theta = field<double>(config, "rope_theta", path);
  std::vector<std::pair<std::string, const json*>> scalings;
  for (const char* name : {"rope_scaling", "rope_parameters"}) {
    if (!present(name)) continue;
    const json& s = config.at(name);
    if (!s.is_object()) {
      fail("{}: config.json '{}' = {} must be an object", path.string(), name, shown(s));
    }
    scalings.emplace_back(name, &s);
  }
  std::optional<kernels::RopeParams> scaled;
  std::string scaled_from;
  for (const auto& [name, s_ptr] : scalings) {
    const json& s = *s_ptr;
    static const std::set<std::string> kKnown = {"rope_type",
                                                 "type",
                                                 "rope_theta",
                                                 "factor",
                                                 "low_freq_factor",
                                                 "high_freq_factor",
                                                 "original_max_position_embeddings"};
    std::vector<std::string> unknown;
    for (const auto& [key, value] : s.items()) {
      if (!kKnown.count(key)) unknown.push_back(key);
    }
    if (!unknown.empty()) {
      fail("{}: config.json '{}' fields not supported by the Llama import: {}", path.string(), name,
           fmt::join(unknown, ", "));
    }
    if (s.contains("rope_theta")) {
      const double inner = field<double>(s, "rope_theta", path);
      if (theta && *theta != inner) {
        fail("{}: config.json rope_theta = {} and {}.rope_theta = {} disagree", path.string(),
             *theta, name, inner);
      }
      theta = inner;
    }
    const std::string type = s.value("rope_type", s.value("type", "default"));
    kernels::RopeParams p;
    if (type == "llama3") {
      p.scaling = kernels::RopeScaling::kLlama3;
      p.factor = field<double>(s, "factor", path);
      p.low_freq_factor = field<double>(s, "low_freq_factor", path);
      p.high_freq_factor = field<double>(s, "high_freq_factor", path);
      p.original_max_position_embeddings =
          field<double>(s, "original_max_position_embeddings", path);
    } else if (type != "default") {
      fail(
          "{}: config.json {} rope_type '{}' is not supported; maxctx implements 'default' and "
          "'llama3'",
          path.string(), name, type);
    }
    if (scaled &&
        (scaled->scaling != p.scaling || scaled->factor != p.factor ||
         scaled->low_freq_factor != p.low_freq_factor ||
         scaled->high_freq_factor != p.high_freq_factor ||
         scaled->original_max_position_embeddings != p.original_max_position_embeddings)) {
      fail("{}: config.json {} and {} describe different RoPE scalings", path.string(), scaled_from,
           name);
    }
    scaled = p;
    scaled_from = name;
  }
  if (scaled) rope = *scaled;
  rope.theta = theta.value_or(1e4);
  if (!(rope.theta > 0.0) || !std::isfinite(rope.theta)) {
    fail("{}: config.json rope_theta = {} must be a positive number", path.string(), rope.theta);
  }
  return rope;
}
}  // namespace

namespace {
LlamaConfig llama_config_from_json(const json& config, const fs::path& path);
}  // namespace

LlamaConfig llama_config_from_hf(const fs::path& path) {
  const std::string text = read_input_file(path, "Hugging Face config", 64 * kMiB);
  if (const JsonCheck check = check_json(text); check.too_deep) {
    fail("{}: config.json is {}", path.string(), *check.error);
  }
  json config;
  try {
    config = json::parse(text);
  } catch (const json::exception& e) {
    fail("{}: config.json is not valid JSON ({})", path.string(), e.what());
  }
  if (!config.is_object()) fail("{}: config.json must be an object", path.string());
  // A field of the wrong JSON type anywhere below (model_type: 5, rope_scaling: 5) is the
  // file's error, the same on every rank: one line naming the file, never std::terminate.
  try {
    return llama_config_from_json(config, path);
  } catch (const json::exception& e) {
    fail("{}: config.json has a field of the wrong type ({})", path.string(), e.what());
  }
}

namespace {

LlamaConfig llama_config_from_json(const json& config, const fs::path& path) {
  std::vector<std::string> unknown;
  for (const auto& [name, value] : config.items()) {
    if (!kIgnoredFields.count(name) && !kMappedFields.count(name) && !kMixtralFields.count(name)) {
      unknown.push_back(name);
    }
  }
  if (!unknown.empty()) {
    fail("{}: config.json fields not supported by the Llama import: {}", path.string(),
         fmt::join(unknown, ", "));
  }
  const std::string model_type = config.value("model_type", "llama");
  if (model_type != "llama" && model_type != "mistral" && model_type != "mixtral") {
    fail("{}: model_type '{}' is not supported; use a llama, mistral or mixtral checkpoint",
         path.string(), model_type);
  }
  // Router noise is a training-time perturbation the engine does not apply.
  require_value(config, "router_jitter_noise", 0.0, path);
  require_value(config, "hidden_act", "silu", path);
  require_value(config, "attention_bias", false, path);
  require_value(config, "mlp_bias", false, path);
  require_value(config, "pretraining_tp", 1, path);
  // Interleaved (GPT-J) rotation pairs x[2i] with x[2i+1]; maxctx rotates halves.
  require_value(config, "rope_interleaved", false, path);
  require_value(config, "add_cross_attention", false, path);
  require_value(config, "tie_encoder_decoder", false, path);
  require_value(config, "pruned_heads", json::object(), path);

  LlamaConfig m;
  m.emb_dim = field<int64_t>(config, "hidden_size", path);
  m.mlp_dim = field<int64_t>(config, "intermediate_size", path);
  m.num_query_heads = field<int64_t>(config, "num_attention_heads", path);
  if (m.num_query_heads <= 0) {
    fail("{}: config.json num_attention_heads = {} must be positive", path.string(),
         m.num_query_heads);
  }
  m.num_kv_heads = config.contains("num_key_value_heads")
                       ? field<int64_t>(config, "num_key_value_heads", path)
                       : m.num_query_heads;
  m.head_dim = config.contains("head_dim") && !config.at("head_dim").is_null()
                   ? field<int64_t>(config, "head_dim", path)
                   : m.emb_dim / m.num_query_heads;
  m.num_layers = field<int64_t>(config, "num_hidden_layers", path);
  m.vocab_size = field<int64_t>(config, "vocab_size", path);
  m.norm_eps = static_cast<float>(field<double>(config, "rms_norm_eps", path));
  m.tie_embeddings = config.value("tie_word_embeddings", false);
  if (config.contains("sliding_window") && !config.at("sliding_window").is_null()) {
    m.sliding_window = field<int32_t>(config, "sliding_window", path);
  }
  m.rope = rope_from_json(config, path);
  if (model_type == "mixtral") {
    m.moe = true;
    m.num_experts = field<int64_t>(config, "num_local_experts", path);
    m.num_experts_per_tok = field<int64_t>(config, "num_experts_per_tok", path);
    // Bounded before anything is sized by it (issue #34 N12: 2^20 experts allocated first).
    if (m.num_experts > limits::kMaxExperts) {
      fail("{}: num_local_experts = {} is more than {}", path.string(), m.num_experts,
           limits::kMaxExperts);
    }
    if (m.num_experts < 1 || m.num_experts_per_tok < 1 || m.num_experts_per_tok > m.num_experts) {
      fail("{}: num_experts_per_tok = {} must be between 1 and num_local_experts = {}",
           path.string(), m.num_experts_per_tok, m.num_experts);
    }
  } else if (config.contains("num_local_experts") || config.contains("num_experts_per_tok")) {
    fail("{}: num_local_experts / num_experts_per_tok need model_type mixtral (got '{}')",
         path.string(), model_type);
  }
  if (m.emb_dim <= 0 || m.num_query_heads <= 0 || m.num_kv_heads <= 0 || m.head_dim <= 0 ||
      m.num_layers <= 0 || m.vocab_size <= 0 || m.mlp_dim <= 0 ||
      m.num_query_heads % m.num_kv_heads != 0 || m.head_dim % 2 != 0) {
    fail("{}: inconsistent dimensions (hidden {}, heads {}, kv heads {}, head_dim {}, layers {})",
         path.string(), m.emb_dim, m.num_query_heads, m.num_kv_heads, m.head_dim, m.num_layers);
  }
  // The same bounds as the config keys (config/size_limits.h): a file's 1e9 layers or 2^33
  // width is refused here, before anything is sized from it.
  const auto at_most = [&](int64_t value, int64_t limit, const char* name) {
    if (value > limit) {
      fail("{}: config.json {} = {} is more than maxctx accepts ({})", path.string(), name, value,
           limit);
    }
  };
  at_most(m.emb_dim, limits::kMaxWidth, "hidden_size");
  at_most(m.mlp_dim, limits::kMaxWidth, "intermediate_size");
  at_most(m.num_query_heads, limits::kMaxHeads, "num_attention_heads");
  at_most(m.num_kv_heads, limits::kMaxHeads, "num_key_value_heads");
  at_most(m.head_dim, limits::kMaxHeadDim, "head_dim");
  at_most(m.num_layers, limits::kMaxLayers, "num_hidden_layers");
  at_most(m.vocab_size, limits::kMaxVocab, "vocab_size");
  // RMSNorm divides by sqrt(mean + eps): eps <= 0 (or one that is 0 as a float) lets an
  // all-zero row become NaN; a non-finite theta makes every RoPE angle NaN.
  if (!(m.norm_eps > 0.0f) || !std::isfinite(m.norm_eps)) {
    fail("{}: config.json rms_norm_eps = {} must be a positive number", path.string(),
         shown(config.at("rms_norm_eps")));
  }
  if (config.contains("sliding_window") && !config.at("sliding_window").is_null() &&
      m.sliding_window <= 0) {
    fail("{}: config.json sliding_window = {} must be positive (null: full attention)",
         path.string(), m.sliding_window);
  }
  return m;
}

}  // namespace

void check_weight_tensors(const io::SliceReader& tensors, const std::vector<WeightSpec>& specs) {
  for (const WeightSpec& s : specs) {
    const io::SlicedTensor& t = tensors.tensor(s.name);
    const std::vector<int64_t> shape = s.global_cols == 1
                                           ? std::vector<int64_t>{s.global_rows}
                                           : std::vector<int64_t>{s.global_rows, s.global_cols};
    if (t.shape != shape) {
      fail(
          "tensor '{}' has shape {}, this model expects {}; the checkpoint is of a different "
          "model configuration",
          s.name, io::shape_string(t.shape), io::shape_string(shape));
    }
    if (!io::is_float_dtype(t.dtype)) {
      fail("tensor '{}' is {}; weights load from F32, BF16 or F16", s.name,
           io::st_dtype_name(t.dtype));
    }
  }
}

void load_weights(const kernels::Kernels& kernels, const std::vector<WeightSpec>& specs,
                  TensorView flat, const io::SliceReader& tensors) {
  MAXCTX_CHECK_EQ(flat.numel(), total_numel(specs), "a flat weight buffer for these specs");
  check_weight_tensors(tensors, specs);
  const bool host_memory = kernels.device() == Device::kCpu;
  Tensor staging;  // one block on the host, for a backend whose memory is not the host's
  for (const WeightSpec& s : specs) {
    if (s.numel() == 0) continue;  // another expert rank's expert: not read from disk
    const TensorView out = flat.elements(s.offset, s.numel());
    TensorView host = out;
    if (!host_memory) {
      if (staging.numel() < out.numel() || staging.dtype() != out.dtype()) {
        staging = Tensor({out.numel()}, out.dtype());
      }
      host = staging.view().elements(0, out.numel());
    }
    // This rank's block only: its rows and columns of the tensor, nothing else is read.
    tensors.read(s.name, io::Rect{s.row_offset, s.col_offset, s.rows, s.cols}, host);
    if (const std::optional<int64_t> bad = first_non_finite(host)) {
      fail(
          "tensor '{}' holds a non-finite value (NaN or Inf) at element {}; the weights are "
          "damaged",
          s.name, *bad);
    }
    // 2^16: far past any trained weight, yet finite, so legal: a warning, not an error.
    if (const std::optional<int64_t> huge = first_with_magnitude_at_least(host, 16)) {
      log::warn(
          "tensor '{}' holds a value of magnitude 2^16 or more at element {}: activations may "
          "overflow; check the weights",
          s.name, *huge);
    }
    if (!host_memory) kernels.copy_from_host(out.raw(), host.raw(), out.bytes());
  }
}

void load_hf_weights(const kernels::Kernels& kernels, const std::vector<WeightSpec>& specs,
                     TensorView flat, const fs::path& checkpoint_dir) {
  load_weights(kernels, specs, flat,
               io::SliceReader(io::open_tensor_index(checkpoint_dir), checkpoint_dir.string()));
}

void load_hf_weights(const std::vector<WeightSpec>& specs, float* flat,
                     const fs::path& checkpoint_dir) {
  load_hf_weights(kernels::backend(Device::kCpu), specs, TensorView::of(flat, total_numel(specs)),
                  checkpoint_dir);
}

void save_hf_weights(const std::vector<WeightSpec>& specs, const float* flat, const fs::path& path,
                     const std::map<std::string, std::string>& metadata) {
  std::vector<io::TensorToWrite> tensors;
  for (const WeightSpec& s : specs) {
    MAXCTX_CHECK(s.rows == s.global_rows && s.cols == s.global_cols,
                 "a Hugging Face checkpoint holds whole tensors, not {}'s shard", s.name);
    std::vector<int64_t> shape =
        s.cols == 1 ? std::vector<int64_t>{s.rows} : std::vector<int64_t>{s.rows, s.cols};
    tensors.push_back(io::tensor_to_write(s.name, io::StDType::kF32, std::move(shape),
                                          std::span<const float>(flat + s.offset, s.numel())));
  }
  io::write_safetensors(path, tensors, metadata);
}

}  // namespace maxctx::model

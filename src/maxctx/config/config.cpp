#include "maxctx/config/config.h"

#include <fmt/format.h>
#include <yaml-cpp/eventhandler.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <bit>
#include <cctype>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <set>
#include <sstream>
#include <vector>

#include "maxctx/config/size_limits.h"
#include "maxctx/config/values.h"
#include "maxctx/core/check.h"
#include "maxctx/core/input_file.h"
#include "maxctx/core/log.h"

namespace maxctx {
namespace {

namespace fs = std::filesystem;

template <typename T>
constexpr KeyType key_type_of() {
  if constexpr (std::is_same_v<T, bool>) return KeyType::kBool;
  if constexpr (std::is_same_v<T, int64_t>) return KeyType::kInt;
  if constexpr (std::is_same_v<T, double>) return KeyType::kFloat;
  if constexpr (std::is_same_v<T, std::string>) return KeyType::kString;
  if constexpr (std::is_same_v<T, IntList>) return KeyType::kIntList;
  if constexpr (std::is_same_v<T, StringList>) return KeyType::kStringList;
  if constexpr (std::is_same_v<T, AxisRules>) return KeyType::kAxisRules;
}

const KeyInfo* find_key(std::string_view name) {
  for (const KeyInfo& info : all_keys()) {
    if (name == info.name) return &info;
  }
  return nullptr;
}

void require_known_key(std::string_view name, std::string_view where) {
  if (find_key(name) != nullptr) return;
  const std::string near = closest_key(name);
  if (near.empty()) {
    fail("unknown config key '{}' {}; no key has a similar name (every key: docs/config.md)", name,
         where);
  }
  fail("unknown config key '{}' {}; did you mean '{}'? (every key: docs/config.md)", name, where,
       near);
}

// Sets one key from a YAML node; the key must exist.
void assign(Config& config, std::string_view key, const YAML::Node& node, std::string_view where) {
#define MAXCTX_ASSIGN(type, name, default_value, allowed, help) \
  if (key == #name) {                                           \
    config_values::parse(node, config.name, #name, where);      \
    return;                                                     \
  }
  MAXCTX_CONFIG_KEYS(MAXCTX_ASSIGN)
#undef MAXCTX_ASSIGN
  require_known_key(key, where);
}

// A key=value argument as a YAML node of the key's type. Strings are taken verbatim (a prompt
// may contain ':' or '#'); lists may be written [1, 2] or 1,2.
YAML::Node node_from_text(const KeyInfo& info, const std::string& text, std::string_view where) {
  if (info.type == KeyType::kString) return YAML::Node(text);
  std::string source = text;
  if ((info.type == KeyType::kIntList || info.type == KeyType::kStringList) &&
      (source.empty() || source.front() != '[')) {
    source = "[" + source + "]";
  }
  try {
    return YAML::Load(source);
  } catch (const YAML::Exception&) {
    fail("config key '{}' {}: cannot read '{}' as a {}", info.name, where, text,
         key_type_name(info.type));
  }
}

struct Setting {
  std::string key;
  YAML::Node value;
  std::string where;
};

// fs::exists without its exception: a name the system cannot look up (longer than a file name
// may be, found by fuzz_yaml_config as a base_config) does not exist here, and the caller's
// not-found error names it.
bool path_exists(const fs::path& path) {
  std::error_code error;
  return fs::exists(path, error);
}

// Where each document starts, and nothing else.
class DocumentStarts final : public YAML::EventHandler {
 public:
  int last_start = -1;
  void OnDocumentStart(const YAML::Mark& mark) override { last_start = mark.pos; }
  void OnDocumentEnd() override {}
  void OnNull(const YAML::Mark&, YAML::anchor_t) override {}
  void OnAlias(const YAML::Mark&, YAML::anchor_t) override {}
  void OnScalar(const YAML::Mark&, const std::string&, YAML::anchor_t,
                const std::string&) override {}
  void OnSequenceStart(const YAML::Mark&, const std::string&, YAML::anchor_t,
                       YAML::EmitterStyle::value) override {}
  void OnSequenceEnd() override {}
  void OnMapStart(const YAML::Mark&, const std::string&, YAML::anchor_t,
                  YAML::EmitterStyle::value) override {}
  void OnMapEnd() override {}
};

// How many documents `text` holds, as YAML::LoadAll counts them. Not LoadAll itself: on some
// malformed texts (",mara# mara", found by fuzz_yaml_config) yaml-cpp 0.7's parser reports one
// empty document after another at the same place without consuming input, and LoadAll never
// returns; a document starting where the previous one did ends the count here.
int count_documents(const std::string& text) {
  std::istringstream in(text);
  YAML::Parser parser(in);
  DocumentStarts starts;
  int documents = 0;
  for (int previous = -1; parser.HandleNextDocument(starts) && starts.last_start != previous;
       previous = starts.last_start) {
    ++documents;
  }
  return documents;
}

YAML::Node read_yaml_file(const fs::path& path) {
  if (!path_exists(path)) fail("config file '{}' does not exist", path.string());
  // A device or a FIFO (base_config: /dev/zero) would be read forever; real configs are a few KB.
  const std::string text = read_input_file(path, "config file", 16 * kMiB);
  try {
    // A second document ("---") would be ignored silently by YAML::Load (issue #34 N16).
    const int documents = count_documents(text);
    if (documents > 1) {
      fail("config file '{}' holds {} YAML documents (separated by ---); a config is one",
           path.string(), documents);
    }
    YAML::Node root = YAML::Load(text);
    if (root.IsNull()) return YAML::Node(YAML::NodeType::Map);
    if (!root.IsMap()) fail("config file '{}' must be a mapping of key: value", path.string());
    // yaml-cpp keeps both entries of a key given twice; the command line refuses a repeated
    // key, and a file follows the same rule rather than letting one of them win silently.
    std::set<std::string> keys;
    for (const auto& entry : root) {
      // YAML also allows null keys and lists or mappings as keys ("? [a, b]"); they name no
      // config key, and yaml-cpp's root["name"] lookups would throw on them.
      if (!entry.first.IsScalar()) {
        fail("config file '{}' has a key that is not a name (null, a list or a mapping)",
             path.string());
      }
      const std::string key = entry.first.Scalar();
      if (!keys.insert(key).second) {
        fail("config file '{}' sets '{}' twice; give each key once", path.string(), key);
      }
    }
    return root;
  } catch (const YAML::Exception& e) {
    fail("config file '{}' is not valid YAML: {}", path.string(), e.what());
  }
}

fs::path project_configs_dir() { return fs::path(MAXCTX_SOURCE_DIR) / "configs"; }

// base_config is relative to the file naming it, else to the project's configs/ (MaxText).
fs::path resolve_base_config(const fs::path& child, const std::string& name) {
  const fs::path beside = child.parent_path() / name;
  if (path_exists(beside)) return beside;
  const fs::path shipped = project_configs_dir() / name;
  if (path_exists(shipped)) return shipped;
  fail("base_config '{}' named in '{}' not found next to it or in {}", name, child.string(),
       project_configs_dir().string());
}

// The settings of `path` and its base_config chain, parents first.
void collect_yaml_chain(const fs::path& path, std::vector<fs::path>& visiting,
                        std::vector<Setting>& settings, std::vector<std::string>& sources) {
  const fs::path canonical = fs::weakly_canonical(path);
  if (std::find(visiting.begin(), visiting.end(), canonical) != visiting.end()) {
    fail("config file '{}' inherits from itself through base_config", path.string());
  }
  visiting.push_back(canonical);
  const YAML::Node root = read_yaml_file(path);
  if (const YAML::Node base = root["base_config"]) {
    if (!base.IsScalar()) fail("base_config in '{}' must be a file name", path.string());
    collect_yaml_chain(resolve_base_config(path, base.Scalar()), visiting, settings, sources);
  }
  const std::string where = fmt::format("in {}", path.string());
  for (const auto& entry : root) {
    const std::string key = entry.first.Scalar();
    if (key == "base_config") continue;
    require_known_key(key, where);
    settings.push_back({key, entry.second, where});
  }
  sources.push_back(path.string());
}

fs::path model_file(const fs::path& config_path, const std::string& model_name) {
  const std::string file = model_name + ".yml";
  const fs::path beside = config_path.parent_path() / "models" / file;
  if (path_exists(beside)) return beside;
  const fs::path shipped = project_configs_dir() / "models" / file;
  if (path_exists(shipped)) return shipped;
  std::vector<std::string> names;
  if (fs::is_directory(project_configs_dir() / "models")) {
    for (const auto& entry : fs::directory_iterator(project_configs_dir() / "models")) {
      if (entry.path().extension() == ".yml") names.push_back(entry.path().stem().string());
    }
  }
  std::sort(names.begin(), names.end());
  fail("model_name '{}' has no file configs/models/{}; known models: default, {}", model_name, file,
       fmt::join(names, ", "));
}

std::vector<std::string> split_allowed(std::string_view allowed) {
  std::vector<std::string> out;
  size_t begin = 0;
  while (true) {
    const size_t bar = allowed.find('|', begin);
    out.emplace_back(allowed.substr(begin, bar - begin));
    if (bar == std::string_view::npos) break;
    begin = bar + 1;
  }
  return out;
}

// Only string keys have allowed sets (keys.h); other types pass through.
template <typename T>
void check_allowed(const T&, std::string_view, std::string_view) {}

void check_allowed(const std::string& value, std::string_view key, std::string_view allowed) {
  if (allowed.empty()) return;
  const auto choices = split_allowed(allowed);
  if (std::find(choices.begin(), choices.end(), value) == choices.end()) {
    std::vector<std::string> shown;
    for (const std::string& choice : choices) shown.push_back(choice.empty() ? "''" : choice);
    fail("config key '{}' = '{}' is not allowed; use one of: {}", key, value,
         fmt::join(shown, ", "));
  }
}

void check_allowed_values(const Config& config) {
#define MAXCTX_CHECK_ALLOWED(type, name, default_value, allowed, help) \
  check_allowed(config.name, #name, allowed);
  MAXCTX_CONFIG_KEYS(MAXCTX_CHECK_ALLOWED)
#undef MAXCTX_CHECK_ALLOWED
}

void require(bool ok, std::string_view message) {
  if (!ok) throw Error(std::string(message));
}

void at_most(int64_t value, int64_t limit, std::string_view key) {
  if (value > limit)
    fail("config key '{}' = {} is more than maxctx accepts ({})", key, value, limit);
}

// base << shift, refused (before shifting) when the result would pass `limit`.
int64_t scaled_size(int64_t base, int shift, int64_t limit, std::string_view derived,
                    std::string_view key) {
  if (shift >= 62 || base > (limit >> shift)) {
    fail(
        "{} = {} x 2^{} (global_parameter_scale) is more than maxctx accepts ({}); make {} or "
        "global_parameter_scale smaller",
        derived, base, shift, limit, key);
  }
  return base << shift;
}

void validate_and_derive(Config& c, int64_t num_devices) {
  check_allowed_values(c);
  require(c.hardware != "tpu",
          "hardware=tpu: maxctx has no TPU backend; use hardware=cpu or hardware=gpu");
  require(c.global_parameter_scale >= 1 &&
              (c.global_parameter_scale & (c.global_parameter_scale - 1)) == 0,
          fmt::format("global_parameter_scale = {} must be a power of two (1, 2, 4, ...)",
                      c.global_parameter_scale));
  // MaxText's split of the scale's exponent over heads, mlp, width and layers.
  const int log2_scale = std::countr_zero(static_cast<uint64_t>(c.global_parameter_scale));
  const int base_scale = log2_scale / 3;
  const int remainder = log2_scale % 3;
  const int head_scale = base_scale + (remainder > 0 ? 1 : 0);
  const int emb_scale = base_scale + (remainder > 1 ? 1 : 0);
  const auto positive = [](int64_t value, std::string_view key) {
    if (value <= 0) fail("config key '{}' = {} must be positive", key, value);
  };
  positive(c.base_emb_dim, "base_emb_dim");
  positive(c.base_num_query_heads, "base_num_query_heads");
  positive(c.base_num_kv_heads, "base_num_kv_heads");
  positive(c.base_mlp_dim, "base_mlp_dim");
  positive(c.base_num_decoder_layers, "base_num_decoder_layers");
  positive(c.vocab_size, "vocab_size");
  positive(c.max_target_length, "max_target_length");
  positive(c.max_prefill_predict_length, "max_prefill_predict_length");
  DerivedConfig& d = c.derived;
  d.emb_dim = scaled_size(c.base_emb_dim, emb_scale, limits::kMaxWidth, "emb_dim", "base_emb_dim");
  d.num_query_heads = scaled_size(c.base_num_query_heads, head_scale, limits::kMaxHeads,
                                  "num_query_heads", "base_num_query_heads");
  d.num_kv_heads = scaled_size(c.base_num_kv_heads, head_scale, limits::kMaxHeads, "num_kv_heads",
                               "base_num_kv_heads");
  d.mlp_dim = scaled_size(c.base_mlp_dim, head_scale, limits::kMaxWidth, "mlp_dim", "base_mlp_dim");
  // MaxText's rule for a model whose every layer is an MoE layer (all of maxctx's): the experts'
  // width base_moe_mlp_dim, when given, is base_mlp_dim.
  require(c.num_experts <= 1 || c.base_moe_mlp_dim == -1 || c.base_moe_mlp_dim == c.base_mlp_dim,
          fmt::format("base_moe_mlp_dim = {} must equal base_mlp_dim = {} when num_experts > 1 "
                      "(every layer is an MoE layer; MaxText's rule), or be -1",
                      c.base_moe_mlp_dim, c.base_mlp_dim));
  d.num_decoder_layers = scaled_size(c.base_num_decoder_layers, base_scale, limits::kMaxLayers,
                                     "num_decoder_layers", "base_num_decoder_layers");
  at_most(c.head_dim, limits::kMaxHeadDim, "head_dim");
  at_most(c.vocab_size, limits::kMaxVocab, "vocab_size");
  at_most(c.max_target_length, limits::kMaxSequence, "max_target_length");
  at_most(c.max_prefill_predict_length, limits::kMaxSequence, "max_prefill_predict_length");
  at_most(c.sliding_window_size, limits::kMaxSequence, "sliding_window_size");
  positive(c.gradient_accumulation_steps, "gradient_accumulation_steps");
  positive(c.num_vocab_tiling, "num_vocab_tiling");
  if (c.num_vocab_tiling > 1) {
    // MaxText's rule (pyconfig): the per-device tokens split into whole tiles. (Untiled, a
    // fractional product is left to the global batch's own check.)
    const double tokens = c.per_device_batch_size * static_cast<double>(c.max_target_length);
    require(std::fmod(tokens, static_cast<double>(c.num_vocab_tiling)) == 0.0,
            fmt::format("num_vocab_tiling = {} must divide per_device_batch_size x "
                        "max_target_length = {} x {} = {} (the tokens each device tiles)",
                        c.num_vocab_tiling, c.per_device_batch_size, c.max_target_length, tokens));
  }
  positive(c.checkpoint_period, "checkpoint_period");
  positive(c.log_period, "log_period");
  require(
      c.head_dim > 0 && c.head_dim % 2 == 0,
      fmt::format("head_dim = {} must be a positive even number (RoPE rotates pairs)", c.head_dim));
  require(d.num_query_heads % d.num_kv_heads == 0,
          fmt::format("num_query_heads {} must be a multiple of num_kv_heads {} (GQA groups)",
                      d.num_query_heads, d.num_kv_heads));
  require(c.mlp_activations == StringList{"silu", "linear"},
          fmt::format("mlp_activations = {} is not supported; use [silu, linear] (SwiGLU)",
                      config_values::format(c.mlp_activations)));
  require(c.normalization_layer_epsilon > 0, "normalization_layer_epsilon must be positive");
  require(c.rope_max_timescale > 0 && c.rope_min_timescale > 0,
          "rope_max_timescale and rope_min_timescale must be positive");
  require(
      c.sliding_window_size >= 0,
      fmt::format("sliding_window_size = {} must be 0 (off) or positive", c.sliding_window_size));
  require(c.attention_type != "local_sliding" || c.sliding_window_size > 0,
          "attention_type=local_sliding needs sliding_window_size > 0");
  // MaxText reads the window only under local_sliding; a window set without it would be
  // silently ignored there, so here it is an error instead.
  require(c.attention_type == "local_sliding" || c.sliding_window_size == 0,
          fmt::format("sliding_window_size = {} has no effect with attention_type = {}; set "
                      "attention_type=local_sliding",
                      c.sliding_window_size, c.attention_type));
  require(c.num_experts <= limits::kMaxExperts,
          fmt::format("num_experts = {} is more than {}", c.num_experts, limits::kMaxExperts));
  require(
      c.num_experts >= 1 && c.num_experts_per_tok >= 1 && c.num_experts_per_tok <= c.num_experts,
      fmt::format("num_experts_per_tok = {} must be between 1 and num_experts = {}",
                  c.num_experts_per_tok, c.num_experts));
  require(c.decoder_block == "mixtral" || c.num_experts == 1,
          fmt::format("num_experts = {} needs decoder_block: mixtral (decoder_block {} is dense)",
                      c.num_experts, c.decoder_block));
  // MaxText keys that steer only TPU/XLA here: validated as MaxText would, then unused.
  for (const auto& [key, value] : {std::pair{"sa_block_q", c.sa_block_q},
                                   {"sa_block_kv", c.sa_block_kv},
                                   {"sa_block_kv_compute", c.sa_block_kv_compute},
                                   {"sa_block_q_dkv", c.sa_block_q_dkv},
                                   {"sa_block_kv_dkv", c.sa_block_kv_dkv},
                                   {"sa_block_kv_dkv_compute", c.sa_block_kv_dkv_compute},
                                   {"sa_block_q_dq", c.sa_block_q_dq},
                                   {"sa_block_kv_dq", c.sa_block_kv_dq}}) {
    positive(value, key);
  }
  {
    // "d,d,d,d": digits at even positions, commas between them, the digits 0-3 once each.
    const std::string& order = c.ar_cache_axis_order;
    std::string digits;
    bool comma_separated = order.size() == 7;
    for (size_t i = 0; i < order.size(); ++i) {
      if (i % 2 == 1) {
        comma_separated = comma_separated && order[i] == ',';
      } else {
        digits += order[i];
      }
    }
    std::sort(digits.begin(), digits.end());
    require(comma_separated && digits == "0123",
            fmt::format("ar_cache_axis_order = '{}' must be a permutation of 0,1,2,3 (e.g. "
                        "MaxText's default 1,2,0,3)",
                        c.ar_cache_axis_order));
  }
  require(c.ici_autoregressive_parallelism == 1,
          fmt::format("ici_autoregressive_parallelism = {}: MaxText's autoregressive axis shards "
                      "attention heads, MLP units, the vocabulary and the KV cache's heads "
                      "(tensor-style) in inference; maxctx has no such axis. Use "
                      "ici_context_autoregressive_parallelism (the cache's sequence)",
                      c.ici_autoregressive_parallelism));
  require(c.load_balance_loss_weight >= 0,
          fmt::format("load_balance_loss_weight = {} must be >= 0", c.load_balance_loss_weight));

  // steps = -1 takes the schedule length and the schedule -1 takes steps (MaxText).
  require(c.steps >= -1, fmt::format("steps = {} is negative; use a step count >= 0, or -1 to "
                                     "take learning_rate_schedule_steps",
                                     c.steps));
  require(c.learning_rate_schedule_steps >= -1,
          fmt::format("learning_rate_schedule_steps = {} must be -1 (= steps) or >= 0",
                      c.learning_rate_schedule_steps));
  if (c.steps == -1 && c.learning_rate_schedule_steps == -1) {
    fail("steps and learning_rate_schedule_steps are both -1; set at least one of them");
  }
  if (c.steps == -1) c.steps = c.learning_rate_schedule_steps;
  if (c.learning_rate_schedule_steps == -1) c.learning_rate_schedule_steps = c.steps;
  require(c.learning_rate >= 0, "learning_rate must be >= 0");
  require(c.warmup_steps_fraction >= 0 && c.warmup_steps_fraction <= 1,
          "warmup_steps_fraction must be in [0, 1]");
  require(c.adam_b1 >= 0 && c.adam_b1 < 1 && c.adam_b2 >= 0 && c.adam_b2 < 1,
          "adam_b1 and adam_b2 must be in [0, 1)");
  require(c.gradient_clipping_threshold >= 0, "gradient_clipping_threshold must be >= 0 (0: off)");

  require(c.per_device_batch_size > 0,
          fmt::format("per_device_batch_size = {} must be positive", c.per_device_batch_size));
  // Bounded before the product below is rounded into an int64_t (1e300 would overflow it).
  require(c.per_device_batch_size * static_cast<double>(num_devices) <=
              static_cast<double>(limits::kMaxGlobalBatch),
          fmt::format("per_device_batch_size = {} x {} devices is more than {} sequences per step",
                      c.per_device_batch_size, num_devices, limits::kMaxGlobalBatch));
  require(num_devices >= 1, "the number of devices must be at least 1");
  d.num_devices = num_devices;
  const double global_batch = c.per_device_batch_size * static_cast<double>(num_devices);
  const double rounded = std::round(global_batch);
  if (rounded < 1 || std::fabs(global_batch - rounded) > 1e-9) {
    fail(
        "per_device_batch_size {} x {} devices = {} sequences: the global batch must be a "
        "whole number >= 1",
        c.per_device_batch_size, num_devices, global_batch);
  }
  d.global_batch_size_to_train_on = static_cast<int64_t>(rounded);

  // One key per axis of the list and tier: an axis added without its keys does not compile.
#define MAXCTX_ICI_DEGREE(Enumerator, name) c.ici_##name##_parallelism,
#define MAXCTX_DCN_DEGREE(Enumerator, name) c.dcn_##name##_parallelism,
  d.ici_parallelism = {MAXCTX_MESH_AXES(MAXCTX_ICI_DEGREE)};
  d.dcn_parallelism = {MAXCTX_MESH_AXES(MAXCTX_DCN_DEGREE)};
#undef MAXCTX_ICI_DEGREE
#undef MAXCTX_DCN_DEGREE
  require(c.debug_simulated_nodes >= 0, "debug_simulated_nodes must be >= 0 (0: detect)");
  require(c.collective_timeout_seconds >= 0,
          "collective_timeout_seconds must be >= 0 (0: wait forever)");
  require(c.max_num_checkpoints_to_keep >= 0,
          "max_num_checkpoints_to_keep must be >= 0 (0: keep every checkpoint)");
}

size_t edit_distance(std::string_view a, std::string_view b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diagonal = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t above = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] != b[j - 1] ? 1 : 0)});
      diagonal = above;
    }
  }
  return row[b.size()];
}

// The words of a key name ("ici_context_parallelism" -> ici, context, parallelism).
std::vector<std::string_view> words_of(std::string_view name) {
  std::vector<std::string_view> words;
  size_t start = 0;
  while (start <= name.size()) {
    const size_t end = std::min(name.find('_', start), name.size());
    if (end > start) words.push_back(name.substr(start, end - start));
    start = end + 1;
  }
  return words;
}

// How many words of four or more letters two names share.
size_t shared_words(const std::vector<std::string_view>& a,
                    const std::vector<std::string_view>& b) {
  size_t shared = 0;
  for (std::string_view word : a) {
    if (word.size() >= 4 && std::find(b.begin(), b.end(), word) != b.end()) ++shared;
  }
  return shared;
}

}  // namespace

std::string_view key_type_name(KeyType type) {
  switch (type) {
    case KeyType::kBool:
      return "bool";
    case KeyType::kInt:
      return "int";
    case KeyType::kFloat:
      return "float";
    case KeyType::kString:
      return "string";
    case KeyType::kIntList:
      return "int list";
    case KeyType::kStringList:
      return "string list";
    case KeyType::kAxisRules:
      return "axis rules";
  }
  return "?";
}

const std::vector<KeyInfo>& all_keys() {
  static const std::vector<KeyInfo> keys = [] {
    std::vector<KeyInfo> out;
    const char* section = "";
#define MAXCTX_KEY_INFO(type, name, default_value, allowed, help) \
  out.push_back({#name, key_type_of<type>(), #default_value, allowed, help, section});
#define MAXCTX_SECTION(title, list) \
  section = title;                  \
  list(MAXCTX_KEY_INFO)
    MAXCTX_CONFIG_SECTIONS(MAXCTX_SECTION)
#undef MAXCTX_SECTION
#undef MAXCTX_KEY_INFO
    return out;
  }();
  return keys;
}

std::string closest_key(std::string_view name) {
  // A suggestion must be near: within a third of the name in edit distance (typos, a dropped
  // underscore), or sharing a whole word of four or more letters ("layers", "parallelism").
  // Among those, more shared words first, then the smaller distance; no suggestion beats a far
  // one ("scan_layers" once suggested "adam_eps").
  const std::vector<std::string_view> words = words_of(name);
  const KeyInfo* best = nullptr;
  size_t best_shared = 0, best_distance = SIZE_MAX;
  for (const KeyInfo& info : all_keys()) {
    const size_t distance = edit_distance(name, info.name);
    const size_t shared = shared_words(words, words_of(info.name));
    const bool near = distance <= std::max<size_t>(2, name.size() / 3) || shared > 0;
    if (!near) continue;
    if (best == nullptr || shared > best_shared ||
        (shared == best_shared && distance < best_distance)) {
      best = &info;
      best_shared = shared;
      best_distance = distance;
    }
  }
  return best == nullptr ? std::string() : std::string(best->name);
}

Config load_config(const std::string& config_path, const std::vector<std::string>& overrides,
                   int64_t num_devices) {
  // Command-line settings first, so that a typo fails before any file is read. MaxText's rule:
  // a key given twice takes the later value (its seed lines repeat profiler=xplane), with a note
  // when the values differ so that the first is not lost silently. The arguments are resolved
  // as text before any YAML node is made (a YAML::Node assigned over another rewrites the node
  // both share).
  std::vector<std::pair<std::string, std::string>> given;  // key, argument
  std::set<std::string> set_on_command_line;
  for (const std::string& argument : overrides) {
    const size_t equals = argument.find('=');
    if (equals == std::string::npos || equals == 0) {
      fail("argument '{}' is not key=value", argument);
    }
    const std::string key = argument.substr(0, equals);
    require_known_key(key, "on the command line");
    if (set_on_command_line.insert(key).second) {
      given.emplace_back(key, argument);
      continue;
    }
    auto& earlier = std::find_if(given.begin(), given.end(), [&](const auto& g) {
                      return g.first == key;
                    })->second;
    if (earlier != argument) {
      log::info(
          "note: config key '{}' is given twice on the command line; the later value '{}' is "
          "used, not '{}'",
          key, argument.substr(equals + 1), earlier.substr(equals + 1));
    }
    earlier = argument;
  }
  std::vector<Setting> command_line;
  for (const auto& [key, argument] : given) {
    const std::string where = "on the command line";
    command_line.push_back({key,
                            node_from_text(*find_key(key), argument.substr(key.size() + 1),
                                           fmt::format("{} ({})", where, argument)),
                            where});
  }
  std::vector<Setting> environment;
  for (const KeyInfo& info : all_keys()) {
    std::string variable = "M_" + std::string(info.name);
    std::transform(variable.begin(), variable.end(), variable.begin(),
                   [](unsigned char c) { return std::toupper(c); });
    const char* value = std::getenv(variable.c_str());
    if (value == nullptr) continue;
    if (set_on_command_line.count(info.name)) {
      fail("config key '{}' is set both on the command line and by ${}; use one", info.name,
           variable);
    }
    const std::string where = fmt::format("in ${}", variable);
    environment.push_back({info.name, node_from_text(info, value, where), where});
  }

  Config config;
  std::vector<fs::path> visiting;
  std::vector<Setting> file_settings;
  collect_yaml_chain(config_path, visiting, file_settings, config.sources);
  for (const Setting& s : file_settings) assign(config, s.key, s.value, s.where);

  // The model preset: named by the files, the environment or the command line.
  for (const auto* layer : {&environment, &command_line}) {
    for (const Setting& s : *layer) {
      if (s.key == "model_name" || s.key == "override_model_config") {
        assign(config, s.key, s.value, s.where);
      }
    }
  }
  if (config.model_name != "default") {
    const fs::path path = model_file(config_path, config.model_name);
    const YAML::Node root = read_yaml_file(path);
    const std::string where = fmt::format("in {}", path.string());
    for (const auto& entry : root) {
      const std::string key = entry.first.Scalar();
      require_known_key(key, where);
      if (key == "model_name") fail("model file '{}' must not set model_name", path.string());
      if (set_on_command_line.count(key) && !config.override_model_config) {
        fail(
            "config key '{}' is set by model file {} and on the command line; pass "
            "override_model_config=true to override the model",
            key, path.string());
      }
      assign(config, key, entry.second, where);
    }
    config.sources.push_back(path.string());
  }
  for (const auto* layer : {&environment, &command_line}) {
    for (const Setting& s : *layer) {
      assign(config, s.key, s.value, s.where);
      config.explicit_keys.push_back(s.key);
    }
  }
  validate_and_derive(config, num_devices);
  return config;
}

std::string format_value(const Config& config, std::string_view key) {
#define MAXCTX_FORMAT_KEY(type, name, default_value, allowed, help) \
  if (key == #name) return config_values::format(config.name);
  MAXCTX_CONFIG_KEYS(MAXCTX_FORMAT_KEY)
#undef MAXCTX_FORMAT_KEY
  require_known_key(key, "asked for");
  return "";
}

namespace {

// The index of `key`'s value in its allowed list ("a|b|c"): the enumerator of a choice key.
template <typename Enum>
Enum choice(const Config& config, std::string_view key) {
  const auto info = std::find_if(all_keys().begin(), all_keys().end(),
                                 [&](const KeyInfo& k) { return k.name == key; });
  MAXCTX_CHECK(info != all_keys().end(), "no config key {}", key);
  const std::string value = format_value(config, key);
  std::string_view allowed = info->allowed;
  for (int index = 0;; ++index) {
    const size_t bar = allowed.find('|');
    if (allowed.substr(0, bar) == value) return static_cast<Enum>(index);
    if (bar == std::string_view::npos) break;
    allowed.remove_prefix(bar + 1);
  }
  fail("{} = '{}': allowed values are {}", key, value, info->allowed);
}

}  // namespace

ContextParallelStrategy context_parallel_strategy(const Config& config) {
  return choice<ContextParallelStrategy>(config, "context_parallel_strategy");
}
DatasetType dataset_type(const Config& config) {
  return choice<DatasetType>(config, "dataset_type");
}
HardwareKind hardware_kind(const Config& config) {
  return choice<HardwareKind>(config, "hardware");
}
DecodeSharding context_autoregressive_decode(const Config& config) {
  return choice<DecodeSharding>(config, "context_autoregressive_decode");
}

std::string format_config(const Config& config) {
  std::string out;
  for (const std::string& source : config.sources) out += fmt::format("Config file {}\n", source);
  for (const KeyInfo& info : all_keys()) {
    out += fmt::format("Config param {}: {}\n", info.name, format_value(config, info.name));
  }
  const DerivedConfig& d = config.derived;
  out += fmt::format(
      "Config derived emb_dim: {}\nConfig derived num_query_heads: {}\n"
      "Config derived num_kv_heads: {}\nConfig derived mlp_dim: {}\n"
      "Config derived num_decoder_layers: {}\nConfig derived num_devices: {}\n"
      "Config derived global_batch_size_to_train_on: {}\n",
      d.emb_dim, d.num_query_heads, d.num_kv_heads, d.mlp_dim, d.num_decoder_layers, d.num_devices,
      d.global_batch_size_to_train_on);
  return out;
}

std::string generate_config_doc() {
  const Config defaults;
  std::string out =
      "# Config keys\n\n"
      "Generated from `src/maxctx/config/keys.h` by `maxctx config-doc` (`make docs`); a test\n"
      "fails when this file and the declaration list disagree.\n\n"
      "`maxctx <command> <config.yml> [key=value ...]`. Resolution, later wins: these defaults,\n"
      "the YAML's `base_config:` chain (relative to the file, else `configs/`),\n"
      "`configs/models/<model_name>.yml`, `M_<KEY>` environment variables, `key=value`\n"
      "arguments. A key the model file sets may be overridden on the command line only with\n"
      "`override_model_config=true`. Unknown keys and values outside the allowed set are errors.\n"
      "Keys marked `maxctx:` are not in MaxText.\n";
  std::string section;
  for (const KeyInfo& info : all_keys()) {
    if (section != info.section) {
      section = info.section;
      out += fmt::format(
          "\n## {}\n\n| key | type | default | allowed | description |\n"
          "|---|---|---|---|---|\n",
          section);
    }
    std::string allowed = info.allowed;
    std::replace(allowed.begin(), allowed.end(), '|', ',');
    if (!allowed.empty() && allowed.front() == ',') allowed = "''" + allowed;
    out += fmt::format("| `{}` | {} | `{}` | {} | {} |\n", info.name, key_type_name(info.type),
                       format_value(defaults, info.name), allowed, info.help);
  }
  out +=
      "\n## Derived values\n\n"
      "`emb_dim`, `num_query_heads`, `num_kv_heads`, `mlp_dim`, `num_decoder_layers`: the base_*\n"
      "values scaled by `global_parameter_scale` as MaxText splits it. `num_devices`: the MPI\n"
      "world size. `global_batch_size_to_train_on` = `per_device_batch_size` x `num_devices`,\n"
      "which must be a whole number; a fractional `per_device_batch_size` needs `context` > 1.\n";
  return out;
}

void validate_batch(const Config& config, int64_t context_size) {
  const double fraction = config.per_device_batch_size - std::floor(config.per_device_batch_size);
  if (fraction != 0.0 && context_size <= 1) {
    fail(
        "per_device_batch_size = {} is fractional, which needs context parallelism "
        "(context > 1, where ranks share a sequence); the context axis here is {}",
        config.per_device_batch_size, context_size);
  }
}

}  // namespace maxctx

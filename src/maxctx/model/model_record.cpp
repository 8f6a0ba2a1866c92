#include "maxctx/model/model_record.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <string>

#include "maxctx/core/check.h"
#include "maxctx/core/input_file.h"
#include "maxctx/core/json_checks.h"
#include "maxctx/core/log.h"

namespace maxctx::model {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

// Record values are bounded so that a damaged or hostile state.json cannot ask for an absurd
// model before the tensor shapes are compared.
constexpr int64_t kMaxDimension = (int64_t{1} << 31) - 1;

int64_t integer_in(const json& v, int64_t lo, const std::string& what) {
  if (!v.is_number_integer() || v.get<int64_t>() < lo || v.get<int64_t>() > kMaxDimension) {
    fail("{} is {}, expected an integer in [{}, 2^31 - 1]", what, v.dump(), lo);
  }
  return v.get<int64_t>();
}

double positive(const json& v, const std::string& what) {
  if (!v.is_number() || !std::isfinite(v.get<double>()) || !(v.get<double>() > 0.0)) {
    fail("{} is {}, expected a positive number", what, v.dump());
  }
  return v.get<double>();
}

bool boolean(const json& v, const std::string& what) {
  if (!v.is_boolean()) fail("{} is {}, expected true or false", what, v.dump());
  return v.get<bool>();
}

// A float as the shortest decimal that reads back to it (1e-06, not 9.99999997e-07), so the
// record shows the value the config or config.json gave.
double shortest(float value) { return std::stod(fmt::format("{}", value)); }

bool always(const LlamaConfig&) { return true; }
bool llama3_rope(const LlamaConfig& m) { return m.rope.scaling == kernels::RopeScaling::kLlama3; }
bool experts(const LlamaConfig& m) { return m.moe; }

// One field of the record: its name, the config keys that set it, whether a model has it (the
// Llama 3 factors only with that scaling, the expert counts only with experts), and its value.
struct Field {
  const char* name;
  std::vector<std::string> keys;
  bool (*applies)(const LlamaConfig&);
  std::function<json(const LlamaConfig&)> get;
  std::function<void(const json&, LlamaConfig&, const std::string& what)> set;
};

// A count of the model (a LlamaConfig member) of at least `lo`.
Field count(const char* name, std::vector<std::string> keys, int64_t LlamaConfig::*member,
            int64_t lo = 1, bool (*applies)(const LlamaConfig&) = always) {
  return {name, std::move(keys), applies,
          [member](const LlamaConfig& m) { return json(m.*member); },
          [member, lo](const json& v, LlamaConfig& m, const std::string& w) {
            m.*member = integer_in(v, lo, w);
          }};
}

// A Llama 3 RoPE factor (a RopeParams member).
Field rope_factor(const char* name, const char* key, double kernels::RopeParams::*member) {
  return {name,
          {"rope_type", key},
          llama3_rope,
          [member](const LlamaConfig& m) { return json(m.rope.*member); },
          [member](const json& v, LlamaConfig& m, const std::string& w) {
            m.rope.*member = positive(v, w);
          }};
}

// A switch of the model (a LlamaConfig member).
Field flag(const char* name, const char* key, bool LlamaConfig::*member) {
  return {
      name,
      {key},
      always,
      [member](const LlamaConfig& m) { return json(m.*member); },
      [member](const json& v, LlamaConfig& m, const std::string& w) { m.*member = boolean(v, w); }};
}

// In an order where a field that decides whether others apply (rope_type, moe) comes first.
const std::vector<Field>& fields() {
  const auto scaled_by = [](const char* key) {
    return std::vector<std::string>{key, "global_parameter_scale"};
  };
  static const std::vector<Field> kFields = {
      count("vocab_size", {"vocab_size"}, &LlamaConfig::vocab_size),
      count("emb_dim", scaled_by("base_emb_dim"), &LlamaConfig::emb_dim),
      count("num_query_heads", scaled_by("base_num_query_heads"), &LlamaConfig::num_query_heads),
      count("num_kv_heads", scaled_by("base_num_kv_heads"), &LlamaConfig::num_kv_heads),
      count("head_dim", {"head_dim"}, &LlamaConfig::head_dim),
      count("mlp_dim", scaled_by("base_mlp_dim"), &LlamaConfig::mlp_dim),
      count("num_layers", scaled_by("base_num_decoder_layers"), &LlamaConfig::num_layers),
      {"norm_eps",
       {"normalization_layer_epsilon"},
       always,
       [](const LlamaConfig& m) { return json(shortest(m.norm_eps)); },
       [](const json& v, LlamaConfig& m, const std::string& w) {
         m.norm_eps = static_cast<float>(positive(v, w));
       }},
      {"rope_theta",
       {"rope_max_timescale"},
       always,
       [](const LlamaConfig& m) { return json(m.rope.theta); },
       [](const json& v, LlamaConfig& m, const std::string& w) { m.rope.theta = positive(v, w); }},
      {"rope_type",
       {"rope_type"},
       always,
       [](const LlamaConfig& m) { return json(llama3_rope(m) ? "llama3" : "default"); },
       [](const json& v, LlamaConfig& m, const std::string& w) {
         if (v != "default" && v != "llama3") {
           fail("{} is {}, expected \"default\" or \"llama3\"", w, v.dump());
         }
         m.rope.scaling =
             v == "llama3" ? kernels::RopeScaling::kLlama3 : kernels::RopeScaling::kNone;
       }},
      rope_factor("rope_factor", "rope_scaling_factor", &kernels::RopeParams::factor),
      rope_factor("rope_low_freq_factor", "rope_low_freq_factor",
                  &kernels::RopeParams::low_freq_factor),
      rope_factor("rope_high_freq_factor", "rope_high_freq_factor",
                  &kernels::RopeParams::high_freq_factor),
      {"rope_original_max_position_embeddings",
       {"rope_type", "rope_original_max_position_embeddings"},
       llama3_rope,
       [](const LlamaConfig& m) {
         return json(static_cast<int64_t>(m.rope.original_max_position_embeddings));
       },
       [](const json& v, LlamaConfig& m, const std::string& w) {
         m.rope.original_max_position_embeddings = static_cast<double>(integer_in(v, 1, w));
       }},
      flag("tie_embeddings", "logits_via_embedding", &LlamaConfig::tie_embeddings),
      {"sliding_window",
       {"attention_type", "sliding_window_size"},
       always,
       [](const LlamaConfig& m) { return json(m.sliding_window); },
       [](const json& v, LlamaConfig& m, const std::string& w) {
         m.sliding_window = static_cast<int32_t>(integer_in(v, 0, w));
       }},
      flag("moe", "decoder_block", &LlamaConfig::moe),
      count("num_experts", {"decoder_block", "num_experts"}, &LlamaConfig::num_experts, 1, experts),
      count("num_experts_per_tok", {"decoder_block", "num_experts_per_tok"},
            &LlamaConfig::num_experts_per_tok, 1, experts),
  };
  return kFields;
}

}  // namespace

nlohmann::ordered_json model_record(const LlamaConfig& m) {
  nlohmann::ordered_json record = nlohmann::ordered_json::object();
  for (const Field& f : fields()) {
    if (f.applies(m)) record[f.name] = f.get(m);
  }
  return record;
}

LlamaConfig model_from_record(const json& record, std::string_view where) {
  if (!record.is_object()) {
    fail("{}: \"model\" is a JSON {}, expected an object of the model's fields", where,
         record.type_name());
  }
  LlamaConfig m;
  size_t used = 0;
  for (const Field& f : fields()) {
    const std::string what = fmt::format("{}: model field \"{}\"", where, f.name);
    const bool present = record.contains(f.name);
    if (!f.applies(m)) {
      if (present) fail("{} is recorded for a model that does not have it", what);
      continue;
    }
    if (!present) fail("{}: the model record has no \"{}\"", where, f.name);
    f.set(record[f.name], m, what);
    ++used;
  }
  if (used != record.size()) {
    for (const auto& [key, value] : record.items()) {
      bool known = false;
      for (const Field& f : fields()) known = known || key == f.name;
      if (!known) fail("{}: the model record has an unknown field \"{}\"", where, key);
    }
  }
  if (parameter_count<double>(m) > 0x1p62) {
    fail("{}: the recorded model has {:.3g} parameters, more than 2^62", where,
         parameter_count<double>(m));
  }
  return m;
}

std::optional<std::string> model_difference(const LlamaConfig& recorded, const LlamaConfig& running,
                                            const std::set<std::string>* only_keys) {
  for (const Field& f : fields()) {
    if (only_keys != nullptr) {
      bool set = false;
      for (const std::string& key : f.keys) set = set || only_keys->contains(key);
      if (!set) continue;
    }
    // A field either model has (the other holds its value unused: the config's factors without
    // Llama 3 scaling); a difference in whether it applies shows in rope_type or moe first.
    if (!f.applies(recorded) && !f.applies(running)) continue;
    const json a = f.get(recorded), b = f.get(running);
    if (a == b) continue;
    return fmt::format("the checkpoint's model has {} {}, this run's has {} (config key {})",
                       f.name, a.dump(), b.dump(), fmt::join(f.keys, " / "));
  }
  return std::nullopt;
}

std::set<std::string> explicit_model_keys(const Config& c) {
  const bool preset = std::find(c.explicit_keys.begin(), c.explicit_keys.end(), "model_name") !=
                          c.explicit_keys.end() &&
                      c.model_name != "default";
  std::set<std::string> keys;
  for (const Field& f : fields()) {
    for (const std::string& key : f.keys) {
      if (preset ||
          std::find(c.explicit_keys.begin(), c.explicit_keys.end(), key) != c.explicit_keys.end()) {
        keys.insert(key);
      }
    }
  }
  return keys;
}

const std::set<std::string>& rope_keys() {
  static const std::set<std::string> kKeys = {
      "rope_max_timescale",    "rope_type",
      "rope_scaling_factor",   "rope_low_freq_factor",
      "rope_high_freq_factor", "rope_original_max_position_embeddings"};
  return kKeys;
}

std::optional<LlamaConfig> read_recorded_model(const fs::path& dir) {
  const fs::path path = dir / "state.json";
  std::error_code ec;
  if (!fs::exists(fs::symlink_status(path, ec))) return std::nullopt;
  const std::string text = read_input_file(path, "checkpoint state", 64 * kMiB);
  if (const JsonCheck check = check_json(text); check.error) {
    fail("checkpoint state '{}' is not valid JSON ({})", path.string(), *check.error);
  }
  json state;
  try {
    state = json::parse(text);
  } catch (const json::exception& e) {
    fail("checkpoint state '{}' is not valid JSON ({})", path.string(), e.what());
  }
  if (!state.is_object() || !state.contains("model")) return std::nullopt;
  return model_from_record(state["model"], fmt::format("checkpoint state '{}'", path.string()));
}

LlamaConfig checkpoint_model(const Config& c, const fs::path& dir) {
  const std::optional<LlamaConfig> recorded = read_recorded_model(dir);
  if (!recorded) {
    log::info(
        "{}: the checkpoint does not record its model (written before maxctx recorded it); the "
        "model comes from the config's model keys",
        dir.string());
    return llama_config_from(c);
  }
  const std::set<std::string> keys = explicit_model_keys(c);
  if (!keys.empty()) {
    if (const std::optional<std::string> difference =
            model_difference(*recorded, llama_config_from(c), &keys)) {
      fail("{}: {}; leave the key out to use the checkpoint's value", dir.string(), *difference);
    }
  }
  LlamaConfig m = *recorded;
  apply_precision(c, m);
  return m;
}

}  // namespace maxctx::model

// The resolved run configuration: MaxText-style YAML with base_config inheritance, a model
// preset, key=value overrides and M_<KEY> environment variables, then derived values.
//
// Resolution order (later wins): declared defaults (keys.h) -> the base_config chain of the YAML
// -> configs/models/<model_name>.yml -> M_<KEY> environment variables -> key=value arguments.
// A model file's keys may be overridden on the command line only with
// override_model_config=true (MaxText's rule). Every problem is a maxctx::Error with one line.
// Every rank resolves the same inputs to the same Config, so every rank fails the same way.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "maxctx/config/keys.h"
#include "maxctx/core/mesh_axes.h"

namespace maxctx {

// Values computed from the keys, never set directly.
struct DerivedConfig {
  int64_t emb_dim = 0;  // base_emb_dim * 2^log2(global_parameter_scale), likewise below
  int64_t num_query_heads = 0;
  int64_t num_kv_heads = 0;
  int64_t mlp_dim = 0;
  int64_t num_decoder_layers = 0;
  int64_t num_devices = 0;                    // MPI world size
  int64_t global_batch_size_to_train_on = 0;  // per_device_batch_size * num_devices
  // Mesh degrees in the axis list's order (core/mesh_axes.h: data, fsdp, context,
  // context_autoregressive, tensor, expert), from the ici_/dcn_<axis>_parallelism keys.
  std::array<int64_t, kNumMeshAxes> ici_parallelism{};
  std::array<int64_t, kNumMeshAxes> dcn_parallelism{};
};

struct Config {
#define MAXCTX_DECLARE_FIELD(type, name, default_value, allowed, help) type name = default_value;
  MAXCTX_CONFIG_KEYS(MAXCTX_DECLARE_FIELD)
#undef MAXCTX_DECLARE_FIELD
  DerivedConfig derived;
  std::vector<std::string> sources;  // the files read, in order, for the printout
  // Keys set on the command line or by M_<KEY> (the user's explicit choices): these beat a
  // loaded checkpoint's config.json (training's RoPE keys for context extension).
  std::vector<std::string> explicit_keys;
};

// The choice keys as enums, read from their strings (validated against keys.h's allowed values,
// whose order the enumerators follow): code branches on these, so that a misspelt value cannot
// compile where a string comparison would silently be false.
enum class ContextParallelStrategy : unsigned char { kAllGather, kRing };
enum class DatasetType : unsigned char { kSynthetic, kTokens, kRecall, kHf };
enum class HardwareKind : unsigned char { kCpu, kGpu, kGpuMultiprocess, kTpu };
enum class DecodeSharding : unsigned char {
  kSequence,  // KV cache sharded along the sequence, partials merged (the default)
  kBatch,     // decode slots split over the axis (MaxText)
};
ContextParallelStrategy context_parallel_strategy(const Config& config);
DatasetType dataset_type(const Config& config);
HardwareKind hardware_kind(const Config& config);
DecodeSharding context_autoregressive_decode(const Config& config);

enum class KeyType { kBool, kInt, kFloat, kString, kIntList, kStringList, kAxisRules };

// What keys.h says about one key, for docs, error messages and generic code.
struct KeyInfo {
  const char* name;
  KeyType type;
  const char* default_text;
  const char* allowed;  // "a|b|c" or ""
  const char* help;
  const char* section;
};

const std::vector<KeyInfo>& all_keys();
std::string_view key_type_name(KeyType type);

// Loads `config_path` with its base_config chain and the model preset, applies `overrides`
// ("key=value" strings) and M_<KEY> environment variables, validates, derives. `num_devices`
// is the MPI world size (global batch, mesh degrees).
Config load_config(const std::string& config_path, const std::vector<std::string>& overrides,
                   int64_t num_devices);

// The declared key nearest to `name` for a "did you mean" message: close in edit distance or
// sharing a whole word; empty when no key is near.
std::string closest_key(std::string_view name);

// One "key: value" line per key, in declaration order, then the derived values.
std::string format_config(const Config& config);
// The value of one key as text (YAML flow style for lists).
std::string format_value(const Config& config, std::string_view key);

// docs/config.md, generated from keys.h.
std::string generate_config_doc();

// The checks that need the resolved mesh: global batch a whole number, fractional
// per_device_batch_size only when context > 1.
void validate_batch(const Config& config, int64_t context_size);

}  // namespace maxctx

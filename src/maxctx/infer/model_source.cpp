#include "maxctx/infer/model_source.h"

#include <fmt/format.h>

#include <filesystem>

#include "maxctx/core/check.h"
#include "maxctx/core/memory_check.h"
#include "maxctx/model/hf_import.h"
#include "maxctx/model/memory_estimate.h"
#include "maxctx/model/weights.h"

namespace maxctx::infer {
namespace {

// The weights alone, before they are allocated (one rank: the mesh is not known here; the
// engine checks the whole run, KV cache and ranks per machine included).
void check_weights_fit(const model::LlamaConfig& config) {
  const double bytes = model::parameter_bytes(config);
  check_fits_in_memory(bytes, 1, 1, "the model's weights", format_bytes(bytes));
}

}  // namespace

InferenceModel load_inference_model(const Config& c, const kernels::Kernels& kernels) {
  namespace fs = std::filesystem;
  InferenceModel m;
  const std::string& dir = c.load_parameters_path;
  if (dir.empty()) {
    m.config = model::llama_config_from(c);
    check_weights_fit(m.config);
    const auto specs = model::llama_weight_specs(m.config);
    m.weights = kernels.empty({model::total_numel(specs)}, m.config.weight_dtype);
    model::init_weights(kernels, specs, m.weights.view(),
                        static_cast<uint64_t>(c.init_weights_seed));
    m.source = fmt::format(
        "random init (init_weights_seed {}; set load_parameters_path for a "
        "checkpoint)",
        c.init_weights_seed);
    return m;
  }
  if (!fs::is_directory(dir)) {
    fail(
        "load_parameters_path = '{}' is not a directory: give a checkpoint directory holding "
        "model.safetensors",
        dir);
  }
  const fs::path config_json = fs::path(dir) / "config.json";
  if (fs::exists(config_json)) {
    m.config = model::llama_config_from_hf(config_json);
    model::apply_precision(c, m.config);
  } else {
    m.config = model::llama_config_from(c);
  }
  check_weights_fit(m.config);
  const auto specs = model::llama_weight_specs(m.config);
  m.weights = kernels.empty({model::total_numel(specs)}, m.config.weight_dtype);
  model::load_hf_weights(kernels, specs, m.weights.view(), dir);
  m.source = fs::exists(config_json)
                 ? fmt::format("{} (dimensions from its config.json)", dir)
                 : fmt::format("{} (dimensions from model '{}')", dir, c.model_name);
  return m;
}

}  // namespace maxctx::infer

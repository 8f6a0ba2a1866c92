#include "maxctx/infer/model_source.h"

#include <fmt/format.h>

#include <filesystem>

#include "maxctx/core/check.h"
#include "maxctx/core/memory_check.h"
#include "maxctx/model/hf_import.h"
#include "maxctx/model/memory_estimate.h"
#include "maxctx/model/weights.h"
#include "maxctx/parallel/parallelize.h"

namespace maxctx::infer {
namespace {

// This rank's weights alone, before they are allocated (one rank: the engine checks the whole
// run, KV cache and ranks per machine included).
void check_weights_fit(const model::LlamaConfig& config, int64_t group_size) {
  const double bytes = model::inference_weight_bytes(
      config, parallel::inference_expert_ranks(config.moe ? config.num_experts : 0, group_size));
  check_fits_in_memory(bytes, 1, 1, "this rank's weights", format_bytes(bytes));
}

}  // namespace

std::vector<model::WeightSpec> inference_weight_specs(const model::LlamaConfig& config,
                                                      int64_t group_size, int group_rank) {
  const auto ranks = static_cast<int>(
      parallel::inference_expert_ranks(config.moe ? config.num_experts : 0, group_size));
  return model::llama_weight_specs(config, 1, 0, ranks, ranks == 1 ? 0 : group_rank);
}

InferenceModel load_inference_model(const Config& c, const kernels::Kernels& kernels,
                                    const Mesh& mesh) {
  namespace fs = std::filesystem;
  const Communicator& group = parallel::inference_expert_group(mesh);
  InferenceModel m;
  const std::string& dir = c.load_parameters_path;
  if (c.checkpoint_is_quantized && (dir.empty() || c.quantization != "int8")) {
    fail(
        "checkpoint_is_quantized=true needs load_parameters_path=<a quantized checkpoint> and "
        "quantization=int8 (got load_parameters_path='{}', quantization='{}')",
        dir, c.quantization);
  }
  if (dir.empty()) {
    m.config = model::llama_config_from(c);
    check_weights_fit(m.config, group.size());
    const auto specs = inference_weight_specs(m.config, group.size(), group.rank());
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
  check_weights_fit(m.config, group.size());
  const auto specs = inference_weight_specs(m.config, group.size(), group.rank());
  m.weights = kernels.empty({model::total_numel(specs)}, m.config.weight_dtype);
  if (c.checkpoint_is_quantized) {
    if (m.config.tie_embeddings) {
      fail(
          "checkpoint_is_quantized: a model with tied embeddings (lm_head = the embedding) is "
          "not supported; load its F32 checkpoint with quantization=int8");
    }
    m.int8 = model::read_int8_checkpoint(kernels, specs, m.weights.view(), dir);
  } else {
    if (model::is_int8_checkpoint(dir)) {
      fail(
          "{} is a quantized checkpoint (int8 projections): load it with "
          "checkpoint_is_quantized=true quantization=int8",
          dir);
    }
    model::load_hf_weights(kernels, specs, m.weights.view(), dir);
  }
  m.source = fs::exists(config_json)
                 ? fmt::format("{} (dimensions from its config.json)", dir)
                 : fmt::format("{} (dimensions from model '{}')", dir, c.model_name);
  return m;
}

}  // namespace maxctx::infer

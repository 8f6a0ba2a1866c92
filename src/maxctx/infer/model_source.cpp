#include "maxctx/infer/model_source.h"

#include <fmt/format.h>

#include <filesystem>
#include <functional>

#include "maxctx/core/check.h"
#include "maxctx/core/memory_check.h"
#include "maxctx/core/split.h"
#include "maxctx/io/sliced_tensors.h"
#include "maxctx/model/hf_import.h"
#include "maxctx/model/memory_estimate.h"
#include "maxctx/model/model_record.h"
#include "maxctx/model/weights.h"
#include "maxctx/parallel/parallelize.h"

namespace maxctx::infer {
namespace {

// This rank's weights alone, before they are allocated (one rank: the engine checks the whole
// run, KV cache and ranks per machine included).
void check_weights_fit(const model::LlamaConfig& config, int64_t group_size, bool int8,
                       int64_t ca) {
  const double bytes = model::inference_weight_bytes(
      config, parallel::inference_expert_ranks(config.moe ? config.num_experts : 0, group_size),
      int8, ca);
  check_fits_in_memory(bytes, 1, 1, "this rank's weights", format_bytes(bytes));
}

// Fills `m`'s weights for `specs` with `fill(specs, view)` (initialise or read from a file): all
// of them in weight_dtype, or with int8 the float tensors, then each projection into one reused
// buffer, quantized and dropped, one at a time.
void fill_weights(
    InferenceModel& m, const kernels::Kernels& kernels, const std::vector<model::WeightSpec>& specs,
    bool int8, const std::function<void(const std::vector<model::WeightSpec>&, TensorView)>& fill) {
  if (!int8) {
    m.weights = kernels.empty({model::total_numel(specs)}, m.config.weight_dtype);
    fill(specs, m.weights.view());
    return;
  }
  const model::Int8Layout layout = model::int8_layout(specs);
  m.weights = kernels.empty({model::total_numel(layout.float_specs)}, m.config.weight_dtype);
  fill(layout.float_specs, m.weights.view());
  m.int8 = model::quantize_projections(kernels, layout, m.config.weight_dtype,
                                       [&](const model::WeightSpec& s, TensorView out) {
                                         model::WeightSpec one = s;
                                         one.offset = 0;
                                         fill({one}, out.reshaped({s.numel()}));
                                       });
}

}  // namespace

std::vector<model::WeightSpec> inference_weight_specs(const model::LlamaConfig& config,
                                                      int64_t group_size, int group_rank,
                                                      int64_t ca, int ca_rank) {
  const auto ranks = static_cast<int>(
      parallel::inference_expert_ranks(config.moe ? config.num_experts : 0, group_size));
  std::vector<model::WeightSpec> specs =
      model::llama_weight_specs(config, 1, 0, ranks, ranks == 1 ? 0 : group_rank);
  if (ca == 1) return specs;
  // The vocabulary over context_autoregressive: this rank's rows of the embedding and head; and
  // of the attention projections and a dense MLP's (computed through a row split,
  // model::DecoderLayerPlan; a mixture's experts split over expert x ca instead).
  int64_t offset = 0;
  for (model::WeightSpec& s : specs) {
    if (s.role == parallel::WeightRole::kEmbedding || s.role == parallel::WeightRole::kOutputHead ||
        s.name.find(".self_attn.") != std::string::npos ||
        s.name.find(".mlp.") != std::string::npos) {
      s.rows = split_count(s.global_rows, static_cast<int>(ca), ca_rank);
      s.row_offset = split_offset(s.global_rows, static_cast<int>(ca), ca_rank);
    }
    s.offset = offset;
    offset += s.numel();
  }
  return specs;
}

InferenceModel load_inference_model(const Config& c, const kernels::Kernels& kernels,
                                    const Mesh& mesh) {
  namespace fs = std::filesystem;
  const Communicator& group = parallel::inference_expert_group(mesh);
  const Communicator& ca = mesh.axis(Axis::kContextAutoregressive);
  InferenceModel m;
  const std::string& dir = c.load_parameters_path;
  const bool int8 = c.quantization == "int8";
  if (c.checkpoint_is_quantized && (dir.empty() || c.quantization != "int8")) {
    fail(
        "checkpoint_is_quantized=true needs load_parameters_path=<a quantized checkpoint> and "
        "quantization=int8 (got load_parameters_path='{}', quantization='{}')",
        dir, c.quantization);
  }
  const auto seed = static_cast<uint64_t>(c.init_weights_seed);
  if (dir.empty()) {
    m.config = model::llama_config_from(c);
    check_weights_fit(m.config, group.size(), int8, ca.size());
    const auto specs =
        inference_weight_specs(m.config, group.size(), group.rank(), ca.size(), ca.rank());
    fill_weights(m, kernels, specs, int8,
                 [&](const std::vector<model::WeightSpec>& part, TensorView out) {
                   model::init_weights(kernels, part, out, seed);
                 });
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
    m.config = model::checkpoint_model(c, dir);  // the model it records, else the config's
  }
  check_weights_fit(m.config, group.size(), int8, ca.size());
  const auto specs =
      inference_weight_specs(m.config, group.size(), group.rank(), ca.size(), ca.rank());
  if (c.checkpoint_is_quantized) {
    // Tied embeddings: the head is the embedding, which stays a float tensor (as quantizing on
    // load keeps it), so the checkpoint holds no head of its own.
    const model::Int8Layout layout = model::int8_layout(specs);
    m.weights = kernels.empty({model::total_numel(layout.float_specs)}, m.config.weight_dtype);
    m.int8 = model::read_int8_checkpoint(kernels, layout, m.weights.view(), dir);
  } else {
    // A training checkpoint (index.json over its shards) is never an int8 one.
    if (!fs::exists(fs::path(dir) / io::kSliceIndexName) && model::is_int8_checkpoint(dir)) {
      fail(
          "{} is a quantized checkpoint (int8 projections): load it with "
          "checkpoint_is_quantized=true quantization=int8",
          dir);
    }
    const io::SliceReader tensors(io::open_tensor_index(dir), dir);
    // Only this rank's blocks are read; with int8 each projection is read, quantized and dropped.
    model::check_weight_tensors(tensors, specs);
    fill_weights(m, kernels, specs, int8,
                 [&](const std::vector<model::WeightSpec>& part, TensorView out) {
                   model::load_weights(kernels, part, out, tensors);
                 });
  }
  m.source = fs::exists(config_json) ? fmt::format("{} (dimensions from its config.json)", dir)
                                     : fmt::format("{} (dimensions from {})", dir,
                                                   model::read_recorded_model(dir)
                                                       ? std::string("its recorded model")
                                                       : fmt::format("model '{}'", c.model_name));
  return m;
}

}  // namespace maxctx::infer

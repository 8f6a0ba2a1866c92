// Hugging Face Llama/Mistral/Mixtral checkpoints in: config.json mapped to LlamaConfig,
// safetensors tensors (F32/BF16/F16, one file or sharded through model.safetensors.index.json)
// read into the flat weight buffer by their Hugging Face names; and the weights back out as F32
// (save_hf_weights: what `maxctx export` writes).
//
// Strict by design: a config.json field this mapping does not know, or knows but cannot honour
// (biases, another activation, an unknown rope_scaling type), is an error naming the field, so
// a checkpoint is never run with silently different math.
#pragma once

#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "maxctx/model/llama_config.h"
#include "maxctx/model/weights.h"

namespace maxctx::model {

LlamaConfig llama_config_from_hf(const std::filesystem::path& config_json);

// Reads every spec'd tensor (this rank's block of it under tensor parallelism) from the
// checkpoint directory into `flat`. A missing tensor, a shape mismatch or an unconvertible dtype
// is an error naming the tensor and file.
void load_hf_weights(const std::vector<WeightSpec>& specs, float* flat,
                     const std::filesystem::path& checkpoint_dir);
// The same into flat's dtype (f32 or bf16): a tensor the file holds in that dtype and that is
// not split is read straight into place; others pass through one tensor-sized staging buffer.
void load_hf_weights(const kernels::Kernels& kernels, const std::vector<WeightSpec>& specs,
                     TensorView flat, const std::filesystem::path& checkpoint_dir);

// The way back: writes the whole (unsharded) F32 parameters `flat` as `path` (a model.safetensors
// under the Hugging Face names, vectors 1-D), which load_hf_weights reads back bit-exactly.
void save_hf_weights(const std::vector<WeightSpec>& specs, const float* flat,
                     const std::filesystem::path& path,
                     const std::map<std::string, std::string>& metadata = {{"format", "pt"}});

}  // namespace maxctx::model

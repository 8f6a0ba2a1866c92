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

#include "maxctx/io/sliced_tensors.h"
#include "maxctx/kernels/kernels.h"
#include "maxctx/model/llama_config.h"
#include "maxctx/model/weights.h"

namespace maxctx::model {

LlamaConfig llama_config_from_hf(const std::filesystem::path& config_json);

// Checks that `tensors` holds every spec'd weight with its global shape in a float dtype (F32,
// BF16, F16); an error names the first missing or mismatched tensor.
void check_weight_tensors(const io::SliceReader& tensors, const std::vector<WeightSpec>& specs);
// Reads every spec'd tensor's block (this rank's rows and columns under tensor parallelism;
// nothing of another expert rank's experts) from `tensors` into `flat` (flat's dtype, in the
// backend's memory), converting dtype; only those bytes are read from the files, so a rank
// holding a part of the model never reads the rest. NaN or Inf is an error naming the tensor.
void load_weights(const kernels::Kernels& kernels, const std::vector<WeightSpec>& specs,
                  TensorView flat, const io::SliceReader& tensors);
// The same from a directory: a Hugging Face checkpoint (model.safetensors, or shards listed by
// model.safetensors.index.json) or a maxctx training checkpoint <run>/checkpoints/<step>.
void load_hf_weights(const kernels::Kernels& kernels, const std::vector<WeightSpec>& specs,
                     TensorView flat, const std::filesystem::path& checkpoint_dir);
// Into a host f32 buffer.
void load_hf_weights(const std::vector<WeightSpec>& specs, float* flat,
                     const std::filesystem::path& checkpoint_dir);

// The way back: writes the whole (unsharded) F32 parameters `flat` as `path` (a model.safetensors
// under the Hugging Face names, vectors 1-D), which load_hf_weights reads back bit-exactly.
void save_hf_weights(const std::vector<WeightSpec>& specs, const float* flat,
                     const std::filesystem::path& path,
                     const std::map<std::string, std::string>& metadata = {{"format", "pt"}});

}  // namespace maxctx::model

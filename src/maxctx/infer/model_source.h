// Where inference's model comes from: a checkpoint directory or the config's model keys.
//
// load_parameters_path = a directory holding model.safetensors (or a sharded index) with Hugging
// Face tensor names: a Hugging Face checkpoint, or a maxctx training checkpoint
// (runs/<run>/checkpoints/<step>/). The model's dimensions come from its config.json when there
// is one (llama_config_from_hf), else from the config's model keys (model_name, base_*), which
// must then describe the checkpoint (a shape mismatch is an error naming the tensor). Empty:
// the counter-based random initialisation of training (init_weights_seed), for tests and
// benchmarks, which says so in `source`. checkpoint_is_quantized=true (with quantization=int8):
// the directory was written by `maxctx export ... quantization=int8` and its projections are
// read as int8 codes (model/quantized_checkpoint.h), not re-quantized.
#pragma once

#include <string>
#include <vector>

#include "maxctx/config/config.h"
#include "maxctx/core/tensor.h"
#include "maxctx/kernels/kernels.h"
#include "maxctx/mesh/mesh.h"
#include "maxctx/model/llama_config.h"
#include "maxctx/model/quantized_checkpoint.h"
#include "maxctx/model/weights.h"

namespace maxctx::infer {

struct InferenceModel {
  model::LlamaConfig config;
  // inference_weight_specs layout (this rank's), weight_dtype; with quantization=int8 only
  // the int8 layout's float tensors (model::int8_layout), the projections in `int8`.
  Tensor weights;
  std::string source;          // for the log: the directory, or "random init (seed N)"
  model::Int8Parameters int8;  // quantization=int8: the projections' codes and scales
};

// The weights rank `group_rank` of the expert × context_autoregressive group of `group_size`
// ranks (parallel::inference_expert_group) holds: every weight, except that when a mixture of
// experts' experts split over the group (parallel::inference_expert_ranks) the other ranks'
// experts keep empty specs (rank r holds experts [r·X/group_size, (r+1)·X/group_size)), and with
// `ca` > 1 context_autoregressive ranks the embedding and head are split over the vocabulary
// (MaxText's inference rule): rank `ca_rank` holds rows split_offset(V, ca, ca_rank) ..
// + split_count(V, ca, ca_rank) of each, and the attention projections (q, k, v, o) and a dense
// MLP's (gate, up, down) over their output rows alike (issue #31: each weight stored once across
// the axis). The one list the
// loader, the engine, the early memory check and the inference plan read.
std::vector<model::WeightSpec> inference_weight_specs(const model::LlamaConfig& config,
                                                      int64_t group_size, int group_rank,
                                                      int64_t ca = 1, int ca_rank = 0);

// Weights are read (or initialised) straight into config.weight_dtype through `kernels`: a BF16
// checkpoint with weight_dtype=bfloat16 never exists in f32. With quantization=int8 a
// projection is read (or initialised) into one reused buffer, quantized and dropped: no float
// copy of the projections ever exists, a quantized checkpoint's codes are read as they are. Only
// this rank's weights (inference_weight_specs on the mesh's expert × context_autoregressive group)
// are read or allocated: another rank's experts are never read from disk.
InferenceModel load_inference_model(const Config& config, const kernels::Kernels& kernels,
                                    const Mesh& mesh);

}  // namespace maxctx::infer

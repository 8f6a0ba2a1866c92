// Where a training run starts: MaxText's order of precedence, and the model a loaded checkpoint
// implies.
//
//  1. The run's own latest checkpoint (<run_dir>/checkpoints/<step>): everything is restored,
//     whatever else the config says, so a restarted job continues where it stopped.
//  2. load_full_state_path (a checkpoint directory <run>/checkpoints/<step>, or a run directory:
//     its latest checkpoint): parameters, AdamW moments, step and data position.
//     load_parameters_path (a Hugging Face directory, or a checkpoint directory): parameters
//     only; the moments start at zero, the step and the data position at 0. Setting both is an
//     error (MaxText's rule).
//  3. Neither: the counter-based initialisation (init_weights_seed).
// The buffers returned are the whole model (unsharded, weight_dtype); every rank reads them and
// keeps its own shard (the trainer's job), so any training mesh can load any checkpoint.
//
// The model: from the config's model keys, except when load_parameters_path holds a Hugging Face
// config.json, which then gives the dimensions, norm epsilon, tied head, sliding window and RoPE
// (as decode and check-logits read it). RoPE keys set explicitly (command line or M_<KEY>:
// rope_max_timescale, rope_type and Llama 3.1's factors) beat config.json: that is how a loaded
// model's context is extended (a larger RoPE base, or Llama 3 scaling) before fine-tuning at
// longer lengths. A checkpoint whose tensors do not match the model is an error naming the
// tensor.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "maxctx/config/config.h"
#include "maxctx/core/tensor.h"
#include "maxctx/kernels/kernels.h"
#include "maxctx/model/llama_config.h"
#include "maxctx/model/weights.h"

namespace maxctx::train {

// The training model of `config` (see the file comment), precision applied.
model::LlamaConfig training_model_config(const Config& config);

// `config` with its model dimensions replaced by `model`'s (vocab_size, head_dim, the derived
// widths and the experts), so that the data sources and the FLOP counts describe the model actually
// trained.
Config with_model_dimensions(Config config, const model::LlamaConfig& model);

struct StartingState {
  int64_t step = 0;
  int64_t data_position = 0;
  Tensor params;            // whole model, weight_dtype, global_specs layout; empty when
                            // `initialise` (each rank then initialises its shard alone)
  Tensor adam_m, adam_v;    // empty: fresh optimizer (zero moments)
  bool initialise = false;  // no state to read: the counter-based initialisation of the seed
  bool resumed = false;     // from the run's own checkpoint (metrics append)
  std::string source;       // for the log
};

// Reads (or initialises) the state the run starts from; maxctx::Error, one line, for a missing
// or mismatched checkpoint.
StartingState load_starting_state(const Config& config, const std::filesystem::path& run_dir,
                                  const std::vector<model::WeightSpec>& global_specs,
                                  const kernels::Kernels& kernels, DType weight_dtype);

}  // namespace maxctx::train

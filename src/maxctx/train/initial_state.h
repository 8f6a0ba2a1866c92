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
// Nothing is read here: the state is opened (its index checked against the model), and each
// rank then reads only its own shard of it (train/checkpoint_shards.h), so any training mesh can
// load any checkpoint and no rank holds the whole model.
//
// The model: from the config's model keys, except when load_parameters_path holds a Hugging Face
// config.json, which then gives the dimensions, norm epsilon, tied head, sliding window and RoPE
// (as decode and check-logits read it). RoPE keys set explicitly (command line or M_<KEY>:
// rope_max_timescale, rope_type and Llama 3.1's factors) beat config.json: that is how a loaded
// model's context is extended (a larger RoPE base, or Llama 3 scaling) before fine-tuning at
// longer lengths. A checkpoint whose tensors do not match the model is an error naming the
// tensor.
//
// A checkpoint records the model it holds (model/model_record.h). A resume and
// load_full_state_path continue that training: the run's model must equal the recorded one in
// every field, else an error names the field and both values. load_parameters_path of a
// checkpoint starts a new run from its parameters: the same, except that RoPE keys set
// explicitly may differ (context extension, as over a config.json). A checkpoint without the
// record (written before it existed) is read with the run's model, as before, with a note.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "maxctx/config/config.h"
#include "maxctx/core/tensor.h"
#include "maxctx/io/sliced_tensors.h"
#include "maxctx/mesh/communicator.h"
#include "maxctx/model/llama_config.h"
#include "maxctx/model/weights.h"

namespace maxctx::train {

// The training model of `config` (see the file comment), precision and num_vocab_tiling applied.
model::LlamaConfig training_model_config(const Config& config);

// `config` with its model dimensions replaced by `model`'s (vocab_size, head_dim, the derived
// widths and the experts), so that the data sources and the FLOP counts describe the model actually
// trained.
Config with_model_dimensions(Config config, const model::LlamaConfig& model);

struct StartingState {
  int64_t step = 0;
  int64_t data_position = 0;
  // The tensors to read each rank's shard from (a checkpoint or a Hugging Face directory), with
  // global names and shapes; nullopt: the counter-based initialisation of the seed, each rank
  // generating its own shard.
  std::optional<io::SliceReader> tensors;
  bool with_moments = false;  // `tensors` is a full training state (weights and both moments)
  bool resumed = false;       // from the run's own checkpoint (metrics append)
  std::string source;         // for the log
};

// Decides where the run starts (see the file comment) and opens it, collectively over `world`:
// rank 0 finds the run's latest checkpoint (and removes the debris of interrupted saves) and
// every rank opens the step it names, so that no rank resumes alone. Any rank's problem (a
// missing or mismatched checkpoint, an unreadable file) is a one-line maxctx::Error on every
// rank.
// `model` is the run's model (training_model_config), `global_specs` its unsharded weights.
StartingState load_starting_state(const Config& config, const std::filesystem::path& run_dir,
                                  const model::LlamaConfig& model,
                                  const std::vector<model::WeightSpec>& global_specs,
                                  const Communicator& world);

}  // namespace maxctx::train

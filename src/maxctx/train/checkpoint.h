// Training checkpoints: the parameters, both AdamW moments and the position in the data stream,
// so that a resumed run continues exactly where the saved one stopped.
//
// One checkpoint is one directory <run_dir>/checkpoints/<step>/ holding
//   model.safetensors      every weight under its Hugging Face name, F32 (BF16 when the run's
//                          weight_dtype is bfloat16), global shape
//                          ([rows, cols], or [rows] for a vector), metadata {"format": "pt"},
//                          so the file loads as Hugging Face Llama weights as it is;
//   optimizer.safetensors  "adam_m.<name>" and "adam_v.<name>" for every weight, same shapes;
//   state.json             {"format": "maxctx-checkpoint-v1", "step", "data_position", "config"}.
// Invariant: a directory named <step> is always complete. It is written under
// <step>.tmp-<pid>/, synced, and renamed into place; a crash leaves only a .tmp directory, which
// readers ignore and the next write removes. One writer per run directory (rank 0).
// This is not a sharded format: the buffers are the whole model; gathering and scattering the
// shards is the trainer's job.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "maxctx/model/weights.h"

namespace maxctx::train {

inline constexpr std::string_view kCheckpointFormat = "maxctx-checkpoint-v1";

struct CheckpointState {
  int64_t step = 0;           // optimizer steps completed
  int64_t data_position = 0;  // rows of the global batch stream consumed (resume continues here)
  std::string config_text;    // the resolved config (printed form), for provenance
};

// <run_dir>/checkpoints/<step>
std::filesystem::path checkpoint_directory(const std::filesystem::path& run_dir, int64_t step);

// Writes checkpoint `state.step` atomically (see the file comment); an existing checkpoint of the
// same step is replaced. `params`, `adam_m`, `adam_v` are full flat buffers laid out by `specs`,
// which must be unsharded (rows == global_rows, cols == global_cols: checked). I/O failures are
// a maxctx::Error naming the path.
void write_checkpoint(const std::filesystem::path& run_dir, const CheckpointState& state,
                      const std::vector<model::WeightSpec>& specs, std::span<const float> params,
                      std::span<const float> adam_m, std::span<const float> adam_v);

// The largest step with a complete checkpoint directory (state.json present and parseable, both
// safetensors files present); nullopt when there is none. Temporary directories are ignored.
// When the newest <step>/ directory is not complete (damaged after it was written: a corrupt
// state.json, a deleted file), a maxctx::Error names it and why, rather than resuming silently
// from an older checkpoint (what an Orbax user expects: the latest step or an error).
std::optional<int64_t> latest_checkpoint_step(const std::filesystem::path& run_dir);

// max_num_checkpoints_to_keep: deletes the oldest complete checkpoints until `keep` remain
// (keep <= 0: keeps all). Called after a new checkpoint is complete, by its writer.
void remove_old_checkpoints(const std::filesystem::path& run_dir, int64_t keep);

// The same on host views of f32 or bf16 (the weights' dtype, written as F32 or BF16 tensors).
void write_checkpoint(const std::filesystem::path& run_dir, const CheckpointState& state,
                      const std::vector<model::WeightSpec>& specs, TensorView params,
                      TensorView adam_m, TensorView adam_v);
// Reads checkpoint `step` into the three flat buffers and returns its state. Every problem is a
// one-line maxctx::Error naming the file and what is wrong: a missing directory (listing the steps
// that exist) or file, a truncated or corrupt safetensors file, a missing, extra, wrongly shaped
// or non-F32 tensor (a checkpoint of another model), a bad state.json. On error the buffers'
// contents are unspecified.
CheckpointState read_checkpoint(const std::filesystem::path& run_dir, int64_t step,
                                const std::vector<model::WeightSpec>& specs,
                                std::span<float> params, std::span<float> adam_m,
                                std::span<float> adam_v);
// The same into host views; the file's tensors must hold the views' dtype (a checkpoint written
// with another weight_dtype is an error naming it).
CheckpointState read_checkpoint(const std::filesystem::path& run_dir, int64_t step,
                                const std::vector<model::WeightSpec>& specs, TensorView params,
                                TensorView adam_m, TensorView adam_v);

}  // namespace maxctx::train

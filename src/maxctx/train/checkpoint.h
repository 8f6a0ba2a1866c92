// Training checkpoints, sharded: every rank writes the parts of the training state it owns, in
// parallel, and a run on any mesh reads back just the parts it needs (Orbax and PyTorch
// Distributed Checkpoint are the anchors). Nobody ever holds a whole tensor it does not own.
//
// One checkpoint is one directory <run_dir>/checkpoints/<step>/ holding
//   shard-<rank>.safetensors  one per rank that saves anything: its slices of the weights, under
//                             "<name>@<row>,<col>", and of both AdamW moments, under
//                             "adam_m.<name>@..." / "adam_v.<name>@...", in weight_dtype;
//   index.json                every tensor (Hugging Face weight names, the moments as
//                             "adam_m.<name>" / "adam_v.<name>") with its dtype, global shape and
//                             slices: file, rectangle, byte range (io/sliced_tensors.h);
//   state.json                {"format": "maxctx-checkpoint-v2", "step", "data_position",
//                              "num_ranks", "config", "model"}: "model" is the model it holds
//                              (model/model_record.h), which a resume and load_full_state_path
//                              compare with the run's and export uses; checkpoints written
//                              before it was recorded have none and still load.
// Which rank saves which copy is parallel::saves_copy (each element exactly once); what it
// saves is the part of its fsdp shard the copy covers (parallel::flat_slices).
//
// Commit: the ranks write into <step>.tmp-<id>/; once every rank's file is complete and synced
// (a collective), rank 0 writes index.json and state.json, syncs, and renames the directory to
// <step>: the rename is the commit. A crash or kill at any point leaves the previous checkpoints
// as they were and a .tmp directory that readers ignore and the next save (or start) removes.
// A save can run in the background (async_checkpointing): see CheckpointSaver.
//
// Older checkpoints (maxctx-checkpoint-v1: whole tensors in model.safetensors and
// optimizer.safetensors) are still read, through the same slice reader.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "maxctx/io/sliced_tensors.h"
#include "maxctx/mesh/communicator.h"
#include "maxctx/model/llama_config.h"
#include "maxctx/model/weights.h"

namespace maxctx::train {

inline constexpr std::string_view kCheckpointFormat = "maxctx-checkpoint-v2";
inline constexpr std::string_view kUnshardedCheckpointFormat = "maxctx-checkpoint-v1";

struct CheckpointState {
  int64_t step = 0;           // optimizer steps completed
  int64_t data_position = 0;  // rows of the global batch stream consumed (resume continues here)
  std::string config_text;    // the resolved config (printed form), for provenance
  int64_t num_ranks = 1;      // the mesh that saved it (provenance: any mesh restores it)
  bool sharded = true;        // false: an older, unsharded (v1) checkpoint
  // The model it holds (architecture and numerics; not its precision); nullopt: written before
  // checkpoints recorded their model.
  std::optional<model::LlamaConfig> model = std::nullopt;
};

// <run_dir>/checkpoints/<step>
std::filesystem::path checkpoint_directory(const std::filesystem::path& run_dir, int64_t step);
// The name a moment of `weight` is stored under: "adam_m.<weight>", "adam_v.<weight>".
std::string moment_name(std::string_view moment, std::string_view weight);

// The largest step with a complete checkpoint directory; nullopt when there is none. Temporary
// directories are ignored. When the newest <step>/ directory is not complete (damaged after it
// was written: a corrupt state.json, a deleted or truncated file), a maxctx::Error names it and
// why, rather than resuming silently from an older checkpoint.
std::optional<int64_t> latest_checkpoint_step(const std::filesystem::path& run_dir);

// max_num_checkpoints_to_keep: deletes the oldest complete checkpoints until `keep` remain
// (keep <= 0: keeps all). Only committed checkpoints are counted or deleted.
void remove_old_checkpoints(const std::filesystem::path& run_dir, int64_t keep);
// Removes the debris of interrupted saves (.tmp directories); returns their names.
std::vector<std::string> remove_partial_checkpoints(const std::filesystem::path& run_dir);

// A checkpoint opened for reading: its state, and its tensors (weights and moments) by name.
struct OpenCheckpoint {
  CheckpointState state;
  io::SliceReader tensors;
};
// Opens checkpoint `step` of `run_dir` (sharded or v1). A missing directory (listing the steps
// that exist), a missing or truncated file, or a bad state.json or index is a one-line
// maxctx::Error naming the file.
OpenCheckpoint open_checkpoint(const std::filesystem::path& run_dir, int64_t step);

// Checks that `tensors` is a full training state of the model `specs` (unsharded specs): every
// weight and both its moments, nothing else, global shapes, all in the weights' dtype (a
// checkpoint written with another weight_dtype is an error naming it).
void check_full_state(const io::SliceReader& tensors, const std::vector<model::WeightSpec>& specs,
                      DType weight_dtype);

// This rank's part of a save, copied to host memory (the step loop may change the state while
// it is written): slices whose data point into `bytes`.
struct StagedSlices {
  struct Free {
    void operator()(std::byte* p) const;  // std::free: the buffer comes from aligned_alloc
  };
  std::vector<io::SliceToWrite> slices;
  // The slices' bytes back to back in the order of their keys, as the shard file holds them, on
  // a 4 KiB boundary and zero-padded to the next one (io::write_laid_out_slice_file's rules); or
  // null when the slices borrow their bytes from buffers that outlive the write.
  std::unique_ptr<std::byte[], Free> bytes;
  int64_t size = 0;     // bytes
  size_t capacity = 0;  // bytes `bytes` holds room for (a buffer is reused save after save)
};

// Writes checkpoints collectively over `world` (every rank calls every method, in the same
// order). A save stages this rank's slices, then this rank's file is written: on a background
// thread with `async` (MaxText's async_checkpointing; the step loop goes on while it is written)
// or before save() returns. The commit needs every rank's file: poll() (after each step) commits
// as soon as all are written, and finish() waits for them. A second save waits for the first.
// A write that fails on any rank ends the job on every rank with that rank's message (the next
// poll, save or finish throws maxctx::Error everywhere). Host memory: the staged slices of one
// save, at most this rank's shard of the weights and both moments.
class CheckpointSaver {
 public:
  struct Options {
    std::filesystem::path run_dir;
    bool async = true;
    int64_t keep = 0;  // max_num_checkpoints_to_keep
  };
  // `before_commit` runs on rank 0 just before a checkpoint becomes visible (the metrics of the
  // steps it covers reach the disk first).
  CheckpointSaver(const Communicator& world, Options options,
                  std::function<void()> before_commit = {});
  ~CheckpointSaver();  // joins a write in flight; it is not committed
  CheckpointSaver(const CheckpointSaver&) = delete;
  CheckpointSaver& operator=(const CheckpointSaver&) = delete;

  void save(const CheckpointState& state, StagedSlices staged);
  void poll();
  void finish();
  // The staging buffer of the last committed save, for the next one to stage into (its pages are
  // already the process's: no page faults and no unmapping per save), after waiting for a save
  // in flight, which still writes from it. Empty before the first save.
  StagedSlices reusable_staging();
  bool in_flight() const { return pending_ != nullptr; }
  // The staged bytes of the save in flight (0 without one).
  int64_t staged_bytes() const;

 private:
  struct Pending;
  void commit(const Pending& pending);
  const Communicator& world_;
  Options options_;
  std::function<void()> before_commit_;
  std::unique_ptr<Pending> pending_;
  StagedSlices reusable_;  // its bytes and capacity only
};

// One process's save of a whole, unsharded state (tools and tests): the checkpoint a 1-rank run
// writes. `params`, `adam_m`, `adam_v`: flat host buffers laid out by the unsharded `specs`
// (rows == global_rows, checked), f32 or bf16, one dtype.
void write_checkpoint(const std::filesystem::path& run_dir, const CheckpointState& state,
                      const std::vector<model::WeightSpec>& specs, TensorView params,
                      TensorView adam_m, TensorView adam_v);
void write_checkpoint(const std::filesystem::path& run_dir, const CheckpointState& state,
                      const std::vector<model::WeightSpec>& specs, std::span<const float> params,
                      std::span<const float> adam_m, std::span<const float> adam_v);
// Reads checkpoint `step` (any mesh's) whole into three such buffers, checked as
// check_full_state does, and returns its state.
CheckpointState read_checkpoint(const std::filesystem::path& run_dir, int64_t step,
                                const std::vector<model::WeightSpec>& specs, TensorView params,
                                TensorView adam_m, TensorView adam_v);
CheckpointState read_checkpoint(const std::filesystem::path& run_dir, int64_t step,
                                const std::vector<model::WeightSpec>& specs,
                                std::span<float> params, std::span<float> adam_m,
                                std::span<float> adam_v);

}  // namespace maxctx::train

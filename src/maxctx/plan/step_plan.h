// The plan of a training step (`maxctx plan`): what one rank of a mesh that need not exist
// allocates, sends and computes, read from the declarations the trainer builds from (the weight
// list and its fsdp shard layout, the activation fields per remat policy, the attention plans'
// staging and traffic, the MoE buffer list), so the plan and the engine cannot drift apart
// (tests/train_loop/plan_drift_test.cpp runs real steps and compares).
//
// Everything is rank 0's (fsdp shards are uneven by at most one element per unit; rank 0 holds
// the larger part). The step time sums, on a hardware profile, every matmul at the profile's
// rate for its dtype and size, attention at its rate for the head size, the vector kernels at
// their measured rates (or the bytes they move over the memory bandwidth), and each
// collective's wire bytes over its tier's bandwidth plus a latency per call; nothing overlaps.
#pragma once

#include <algorithm>
#include <cstdint>
#include <map>
#include <string>

#include "maxctx/config/config.h"
#include "maxctx/mesh/mesh_shape.h"
#include "maxctx/mesh/traffic.h"
#include "maxctx/parallel/parallelize.h"
#include "maxctx/plan/collective_time.h"
#include "maxctx/plan/hardware_profile.h"
#include "maxctx/plan/step_work.h"
#include "maxctx/train/metrics.h"

namespace maxctx::plan {

struct TrainingMemory {        // bytes on one rank
  int64_t parameters = 0;      // the master weights' fsdp shard (weight_dtype)
  int64_t optimizer = 0;       // AdamW's two moments of the shard (weight_dtype)
  int64_t gradients = 0;       // the reduced f32 gradient shard (+ its accumulator)
  int64_t gathered_units = 0;  // the largest weight unit gathered, with its f32 gradients
  int64_t activations = 0;     // saved activations and workspace under the remat policy
  // What remat_policy=custom offloads (model/remat.h) waits in host memory on a machine whose
  // device memory is not the host's (set_host_is_device(false)); else it is kept in place and
  // counted in `activations` (as the cpu backend does).
  int64_t offloaded_activations = 0;
  int64_t activations_on_a_device = 0;  // activations when the host is not the device
  int64_t offloaded_on_a_device = 0;    // offloaded_activations then
  int64_t activations_on_the_host = 0;  // activations when it is
  int64_t logits = 0;             // of activations: one loss tile's f32 logits (num_vocab_tiling)
  int64_t attention_staging = 0;  // context-parallel K/V all-gather or ring buffers
  // Before the first step, beside the shards: a fresh initialisation's one unit shard of f32
  // values at a time; load_parameters_path's conversion buffer (each rank reads its own shard of
  // the file's tensors straight into place, converting dtype through a bounded buffer).
  int64_t starting_state = 0;
  // A start from a full training state (a resume of the run's own checkpoint, or
  // load_full_state_path) is possible: each rank then reads its shard of the weights and both
  // moments straight into place (train/checkpoint_shards.h), holding nothing beyond the shards.
  bool can_resume = false;
  // A checkpoint save stages this rank's share of the state (its saved parts of the weights and
  // both moments: rank 0 saves its whole shard) in host memory while it is written; with
  // async_checkpointing that copy lives on through the following steps. 0 without
  // checkpointing.
  int64_t checkpoint_state = 0;
  bool async_checkpointing = true;
  // Whether the device's memory is the host's (a cpu run): only then do the host staging
  // buffers above count against the device. Set from the hardware profile.
  bool host_is_device = true;
  // Sparse dispatch under the expert axis: the rows a rank's experts run on are the router's
  // choice, and the counts above are at their mean over the ranks. This is what the expert
  // buffers add (to activations, and to the peak) when every token's choices that this rank's
  // experts can take arrive here: the bound that MaxText's ragged_buffer_factor = -1 sizes for.
  int64_t expert_routing_skew = 0;
  // The buffers of a step, all at once.
  void set_host_is_device(bool host) {
    host_is_device = host;
    activations = host ? activations_on_the_host : activations_on_a_device;
    offloaded_activations = host ? 0 : offloaded_on_a_device;
  }
  int64_t step() const {
    return parameters + optimizer + gradients + gathered_units + activations + attention_staging;
  }
  // What stays allocated between steps (a unit in use is freed by then).
  int64_t between_steps() const {
    return parameters + optimizer + gradients + activations + attention_staging;
  }
  // The most the run holds at once: the step, the start (shards with the starting state), or a
  // checkpoint save (its staging beside the next steps' buffers, or beside the buffers kept
  // between steps when the save is written before training goes on).
  int64_t peak() const {
    const int64_t staging = host_is_device ? checkpoint_state : 0;
    const int64_t save =
        staging > 0 ? (async_checkpointing ? step() : between_steps()) + staging : 0;
    return std::max({step(), parameters + optimizer + (host_is_device ? starting_state : 0), save});
  }
};

struct StepTime {
  double matmul_seconds = 0;     // every weight's matmuls at its shape (StepWork)
  double attention_seconds = 0;  // with the remat policy's recomputation
  double vector_seconds = 0;     // norms, SwiGLU, RoPE, adds, loss, embedding, optimizer
  double compute_seconds = 0;    // the three above
  double communication_seconds = 0;
  double seconds() const { return compute_seconds + communication_seconds; }
  double mfu = 0;  // model FLOPs (MaxText's count) / (seconds x peak of the dtype)
};

struct TrainingPlan {
  parallel::ParallelDims dims;
  int64_t rows = 0;       // sequences per rank
  int64_t local_seq = 0;  // tokens per sequence on this rank
  TrainingMemory memory;
  Traffic traffic;                          // one optimizer step
  std::map<std::string, GroupLink> groups;  // every axis name traffic uses
  TrainingTflops model_tflops;              // MaxText's per-device count (no recompute)
  TrainingTflops executed_tflops;           // with the remat policy's recomputation
  StepWork work;                            // the same step kernel by kernel
};

// Throws maxctx::Error (the engine's own messages) for a config the trainer would refuse.
TrainingPlan plan_training(const Config& config);
StepTime predict_step_time(const TrainingPlan& plan, const Config& config,
                           const HardwareProfile& profile);

}  // namespace maxctx::plan

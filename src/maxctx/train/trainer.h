// MaxText's train.py for maxctx: builds the model, the parallel plans and the data pipeline for
// the mesh at hand, then runs optimizer steps with metrics and checkpoints.
//
// One step: read this rank's rows (data × fsdp) and chunks (context, dual chunk swap); forward
// and backward through the plans (fsdp gathers each weight unit before use and reduce-scatters
// its gradients, summed over data × context); the loss is Σ weight·xent over the global batch /
// Σ weight; global-norm clipping; AdamW on this rank's shard. A run resumes from the latest
// checkpoint in its run directory and then reproduces the uninterrupted run exactly.
#pragma once

#include <filesystem>
#include <memory>
#include <vector>

#include "maxctx/config/config.h"
#include "maxctx/kernels/kernels.h"
#include "maxctx/mesh/mesh.h"

namespace maxctx::train {

struct StepRecord {
  int64_t step = 0;  // 0-based
  double loss = 0.0;
  double grad_norm = 0.0;  // before clipping
  double accuracy = 0.0;   // exact match on the scored targets
  int64_t total_weights = 0;

  // Mixture of experts: `loss` is the lm loss + moe_lb_loss (MaxText's learning/loss).
  double moe_lb_loss = 0.0;
  // Dense dispatch with capacity_factor > 0: the (token, choice) pairs dropped over the step's
  // layers, micro-batches and global batch (the same on every mesh as on one rank).
  int64_t moe_dropped = 0;
  // Evaluation after this step (every eval_interval steps): MaxText's eval/avg_loss,
  // eval/avg_perplexity = exp(avg_loss), eval/total_weights.
  bool evaluated = false;
  double eval_loss = 0.0;
  double eval_perplexity = 0.0;
  double eval_accuracy = 0.0;
  int64_t eval_weights = 0;
  double eval_seconds = 0.0;  // wall time of the evaluation (not counted in the step's time)
};

// What the parameters, gradients and optimizer state hold on this rank (parallel/
// sharded_parameters.h MemoryUse): the fsdp shards, and the most the gathered units in use held
// at once since track_parameter_memory.
struct ParameterMemory {
  int64_t shard_bytes = 0;
  int64_t peak_unit_bytes = 0;
};

// What this rank's training buffers hold now, counted from the buffers (for the check of
// `maxctx plan`, plan/step_plan.h): the parameter shards with both moments and the gradient
// shard, the activations and workspace, the attention plan's staging buffers.
struct AllocatedMemory {
  int64_t shards = 0;
  int64_t activations = 0;
  int64_t attention_staging = 0;
};

class Trainer {
 public:
  // Validates the config against the mesh (training axes only, divisibility) with errors that
  // name the keys; loads the latest checkpoint of the run, or initialises.
  // Runs on `kernels` (the backend the parameters and activations are allocated through).
  Trainer(const Config& config, const Mesh& mesh, const kernels::Kernels& kernels);
  ~Trainer();

  // Runs until `steps` optimizer steps are done (or `max_new_steps` more, when >= 0).
  void run(int64_t max_new_steps = -1);
  int64_t step() const;
  const std::vector<StepRecord>& history() const;
  // Attention tiles this rank computed and skipped over all steps so far (load-balance reports).
  kernels::AttentionStats attention_stats() const;
  // The whole model's parameters in the unsharded Hugging Face layout (collective).
  std::vector<float> gather_parameters();
  // The same for the whole training state: weights and both AdamW moments, as f32 (collective).
  struct GatheredState {
    std::vector<float> params, adam_m, adam_v;
  };
  GatheredState gather_state();
  // The bytes the last checkpoint save staged on this rank (0 before any): what `maxctx plan`
  // counts as checkpoint_state.
  int64_t last_checkpoint_staged_bytes() const;
  std::filesystem::path run_directory() const;
  // Measure the gathered units' resident memory from now on (off by default: it walks the full
  // buffers' pages each time a unit is freed); parameter_memory's peak_unit_bytes is 0 without.
  void track_parameter_memory();
  ParameterMemory parameter_memory() const;
  AllocatedMemory allocated_memory() const;

 private:
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace maxctx::train

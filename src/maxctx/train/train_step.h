// The work of one optimizer step before the update (forward and backward over the step's
// micro-batches, gradients reduced onto this rank's shard), and evaluation (forward only).
//
// Gradient accumulation follows MaxText: gradient_accumulation_steps micro-batches per step,
// each a whole per-device batch (per_device_batch_size rows per device), so a step consumes
// gradient_accumulation_steps × the global batch and equals the step of a batch that many times
// larger: the loss is Σ weight·xent over all micro-batches / Σ weight over all of them (the total
// weight is summed from the micro-batches' targets before any backward), and the gradient is
// that loss's. Each micro-batch's gradient reaches the shard through the usual reduction and is
// summed there in f32; with one micro-batch the step is exactly the plain one.
// Evaluation runs the same forward on every rank's share of the eval rows and sums the loss and
// weights over data × fsdp × context, so every mesh reports the same numbers.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "maxctx/mesh/communicator.h"
#include "maxctx/model/activations.h"
#include "maxctx/model/llama.h"
#include "maxctx/parallel/parallelize.h"
#include "maxctx/train/batch.h"

namespace maxctx::train {

// Sums over the global batch (all micro-batches, all ranks).
struct StepSums {
  double loss_sum = 0.0;    // Σ weight · cross-entropy
  double weight_sum = 0.0;  // Σ weight: scored targets
  double correct = 0.0;     // scored_accuracy: answers predicted exactly
  double scored = 0.0;      // answers scored by it
  // Mixture of experts (training only): MaxText's moe_lb_loss, the mean over the step's
  // micro-batches of each one's load-balance loss; loss() includes it, as learning/loss does.
  double moe_lb_loss = 0.0;
  int64_t moe_dropped = 0;  // (token, choice) pairs dense dispatch dropped, all layers
  double lm_loss() const { return weight_sum > 0 ? loss_sum / weight_sum : 0.0; }
  double loss() const { return lm_loss() + moe_lb_loss; }
  double accuracy() const { return scored > 0 ? correct / scored : 0.0; }
};

// What a step's forward and backward run with: the model, its parameters and plans, and the
// group over which the batch is split (data × fsdp × context).
struct StepModel {
  const model::LlamaConfig& config;
  const model::LlamaWeights& weights;
  const model::LlamaWeights& gradients;  // bound to plans.parameters->full_grads()
  parallel::TrainingParallelPlans& plans;
  const Communicator& batch_group;
  int64_t global_sequences = 0;  // sequences of one micro-batch over the job (MoE loss scale)
};

// Forward and backward over `micro_batches` (this rank's share of each); on return
// plans.parameters->grad_shard() holds the gradient of the step's mean loss. `accumulated` is
// scratch for more than one micro-batch (kept by the caller across steps). Collective.
StepSums forward_backward(const StepModel& model, std::span<const Batch> micro_batches,
                          model::LlamaActivations& acts, Tensor& accumulated);

// Σ weight·xent and Σ weight of the `count` batches read_batch(0), ..., read_batch(count - 1)
// (this rank's shares) over the whole job, forward only, with the current parameters. Each batch
// is read just before its forward, so an eval set is never held in memory whole. Collective.
StepSums evaluate(const StepModel& model, int64_t count,
                  const std::function<Batch(int64_t)>& read_batch, model::LlamaActivations& acts);

}  // namespace maxctx::train

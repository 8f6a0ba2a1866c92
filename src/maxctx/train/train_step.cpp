#include "maxctx/train/train_step.h"

#include <algorithm>

#include "maxctx/core/check.h"
#include "maxctx/train/recall.h"

namespace maxctx::train {
namespace {

std::vector<float> loss_weights_of(const Batch& batch) {
  std::vector<float> weights(static_cast<size_t>(batch.size()));
  for (int64_t i = 0; i < batch.size(); ++i) {
    weights[i] = batch.target_segment_ids[i] != 0 ? 1.0f : 0.0f;
  }
  return weights;
}

model::TokenBatch token_batch(const Batch& batch, const std::vector<float>& loss_weights) {
  return {batch.rows,           batch.seq_len,          batch.tokens.data(),
          batch.targets.data(), batch.positions.data(), batch.segment_ids.data(),
          loss_weights.data()};
}

}  // namespace

StepSums forward_backward(const StepModel& m, std::span<const Batch> micro_batches,
                          model::LlamaActivations& acts, std::vector<float>& accumulated) {
  MAXCTX_CHECK(!micro_batches.empty(), "a step needs at least one micro-batch");
  parallel::ShardedParameters& parameters = *m.plans.parameters;
  // The mean is over the whole step: its total weight is known before the first backward.
  double global_weight = 0.0;
  for (const Batch& b : micro_batches) global_weight += static_cast<double>(total_weights(b));
  m.batch_group.all_reduce(std::span<double>(&global_weight, 1), ReduceOp::kSum);
  const float d_loss = global_weight > 0 ? static_cast<float>(1.0 / global_weight) : 0.0f;

  // MaxText's moe_lb_loss per micro-batch, averaged over the step's micro-batches.
  const double lb_scale = m.config.moe ? model::moe_lb_scale(m.config, m.global_sequences) /
                                             static_cast<double>(micro_batches.size())
                                       : 0.0;

  const bool accumulate = micro_batches.size() > 1;
  if (accumulate) accumulated.assign(parameters.grad_shard().size(), 0.0f);
  double totals[4] = {0.0, 0.0, 0.0, 0.0};  // loss sum, correct, scored, load-balance sum
  for (const Batch& batch : micro_batches) {
    parameters.begin_step();  // zero gradients; weights re-gathered
    const std::vector<float> loss_weights = loss_weights_of(batch);
    const model::TokenBatch tokens = token_batch(batch, loss_weights);
    const model::LossSums sums =
        model::llama_forward(m.config, m.weights, tokens, m.plans.model, acts);
    const ScoredAccuracy accuracy =
        scored_accuracy_from_logits(acts.logits.span<float>(), m.config.vocab_size, batch);
    model::llama_backward(m.config, m.weights, m.gradients, tokens, m.plans.model, acts, d_loss,
                          static_cast<float>(lb_scale));
    totals[0] += sums.loss_sum;
    totals[1] += static_cast<double>(accuracy.correct);
    totals[2] += static_cast<double>(accuracy.scored);
    totals[3] += sums.moe_lb_sum;
    if (accumulate) {
      const std::span<const float> shard = parameters.grad_shard();
      for (size_t i = 0; i < shard.size(); ++i) accumulated[i] += shard[i];
    }
  }
  if (accumulate)
    std::copy(accumulated.begin(), accumulated.end(), parameters.grad_shard().begin());
  m.batch_group.all_reduce(std::span<double>(totals, 4), ReduceOp::kSum);
  return {totals[0], global_weight, totals[1], totals[2], totals[3] * lb_scale};
}

StepSums evaluate(const StepModel& m, int64_t count,
                  const std::function<Batch(int64_t)>& read_batch, model::LlamaActivations& acts) {
  // The optimizer changed the master shard since the weights were last gathered.
  if (m.plans.parameters) m.plans.parameters->begin_step();
  double totals[4] = {0.0, 0.0, 0.0, 0.0};  // loss sum, weight, correct, scored
  for (int64_t b = 0; b < count; ++b) {
    const Batch batch = read_batch(b);
    const std::vector<float> loss_weights = loss_weights_of(batch);
    const model::LossSums sums = model::llama_forward(
        m.config, m.weights, token_batch(batch, loss_weights), m.plans.model, acts);
    const ScoredAccuracy accuracy =
        scored_accuracy_from_logits(acts.logits.span<float>(), m.config.vocab_size, batch);
    totals[0] += sums.loss_sum;
    totals[1] += sums.weight_sum;
    totals[2] += static_cast<double>(accuracy.correct);
    totals[3] += static_cast<double>(accuracy.scored);
  }
  m.batch_group.all_reduce(std::span<double>(totals, 4), ReduceOp::kSum);
  return {totals[0], totals[1], totals[2], totals[3]};
}

}  // namespace maxctx::train

#include "maxctx/train/train_step.h"

#include <algorithm>

#include "maxctx/core/check.h"
#include "maxctx/kernels/host_transfer.h"

namespace maxctx::train {
namespace {

std::vector<float> loss_weights_of(const Batch& batch) {
  std::vector<float> weights(static_cast<size_t>(batch.size()));
  for (int64_t i = 0; i < batch.size(); ++i) {
    weights[i] = batch.target_segment_ids[i] != 0 ? 1.0f : 0.0f;
  }
  return weights;
}

// A micro-batch in the backend's memory: its index arrays and loss weights uploaded once, with
// host copies of what the host computes from (the context plans' ids, the weight sum).
class UploadedBatch {
 public:
  UploadedBatch(const kernels::Kernels& k, const Batch& batch)
      : loss_weights_(loss_weights_of(batch)), loss_weights_device_(k.empty({batch.size()})) {
    const size_t n = static_cast<size_t>(batch.size());
    std::vector<int32_t> ids(4 * n);  // tokens | targets | positions | segment ids
    for (size_t a = 0; const std::vector<int32_t>* array :
                       {&batch.tokens, &batch.targets, &batch.positions, &batch.segment_ids}) {
      std::copy(array->begin(), array->end(), ids.begin() + static_cast<int64_t>(a++ * n));
    }
    ids_.upload(k, ids);
    k.copy_from_host(loss_weights_device_.view().raw(), loss_weights_.data(), n * sizeof(float));
    const int32_t* device = ids_.data();
    tokens_ = {batch.rows,
               batch.seq_len,
               device,
               device + n,
               device + 2 * n,
               device + 3 * n,
               static_cast<const float*>(loss_weights_device_.view().raw()),
               batch.positions.data(),
               batch.segment_ids.data(),
               loss_weights_.data()};
  }
  const model::TokenBatch& tokens() const { return tokens_; }

 private:
  std::vector<float> loss_weights_;
  kernels::DeviceIndices ids_;
  Tensor loss_weights_device_;
  model::TokenBatch tokens_;
};

}  // namespace

StepSums forward_backward(const StepModel& m, std::span<const Batch> micro_batches,
                          model::LlamaActivations& acts, Tensor& accumulated) {
  const kernels::Kernels& k = *m.plans.model.kernels;
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
  if (accumulate) {
    k.reserve(accumulated, parameters.grad_shard().numel());
    k.fill_zero(accumulated.view());
  }
  // loss sum, correct, scored, load-balance sum, dropped choices (exact in a double)
  double totals[5] = {0.0, 0.0, 0.0, 0.0, 0.0};
  for (const Batch& batch : micro_batches) {
    parameters.begin_step();  // zero gradients; weights re-gathered
    const UploadedBatch uploaded(k, batch);
    const model::TokenBatch& tokens = uploaded.tokens();
    // The accuracy's hits are counted on the backend tile by tile: the logits are never read
    // back, and the micro-batch's sums come back in one readout (llama.h).
    const model::LossSums sums =
        model::llama_forward_backward(m.config, m.weights, m.gradients, tokens, m.plans.model, acts,
                                      d_loss, static_cast<float>(lb_scale), /*count_hits=*/true);
    totals[0] += sums.loss_sum;
    totals[1] += sums.correct;
    totals[2] += sums.scored;
    totals[3] += sums.moe_lb_sum;
    totals[4] += static_cast<double>(sums.moe_dropped);
    if (accumulate) {
      k.add_inplace(accumulated.view().elements(0, parameters.grad_shard().numel()),
                    parameters.grad_shard());
    }
  }
  if (accumulate) {
    k.copy(parameters.grad_shard(),
           accumulated.view().elements(0, parameters.grad_shard().numel()));
  }
  m.batch_group.all_reduce(std::span<double>(totals, 5), ReduceOp::kSum);
  return {totals[0], global_weight,        totals[1],
          totals[2], totals[3] * lb_scale, static_cast<int64_t>(totals[4])};
}

StepSums evaluate(const StepModel& m, int64_t count,
                  const std::function<Batch(int64_t)>& read_batch, model::LlamaActivations& acts) {
  // The optimizer changed the master shard since the weights were last gathered.
  const kernels::Kernels& k = *m.plans.model.kernels;
  if (m.plans.parameters) m.plans.parameters->begin_step();
  double totals[4] = {0.0, 0.0, 0.0, 0.0};  // loss sum, weight, correct, scored
  for (int64_t b = 0; b < count; ++b) {
    const Batch batch = read_batch(b);
    const UploadedBatch uploaded(k, batch);
    const model::LossSums sums = model::llama_forward(m.config, m.weights, uploaded.tokens(),
                                                      m.plans.model, acts, /*count_hits=*/true);
    totals[0] += sums.loss_sum;
    totals[1] += sums.weight_sum;
    totals[2] += sums.correct;
    totals[3] += sums.scored;
  }
  m.batch_group.all_reduce(std::span<double>(totals, 4), ReduceOp::kSum);
  return {totals[0], totals[1], totals[2], totals[3]};
}

}  // namespace maxctx::train

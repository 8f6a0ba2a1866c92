// Parameters, gradients and optimizer state under data, fsdp and context parallelism (ZeRO-3
// over `fsdp`, replication over `data` and `context`), and the gradient reduction.
//
// The flat parameter buffer (model/weights.h layout, this tensor rank's blocks) is cut into the
// model's weight units (embedding, each layer, head); every unit is split over the fsdp ranks
// by split_counts, and each rank owns one shard of each: the fp32 master weights and the AdamW
// moments exist only for that shard. In a step, a unit's full weights are all-gathered over
// fsdp just before the model first uses them (WeightPlan::before_use), and as soon as the
// backward has finished a unit its gradients are reduce-scattered over fsdp and summed over
// the replica axes (data × context): every rank ends with the gradient of the global loss for
// its shard. With fsdp = 1 the shard is the whole unit and only the replica sum remains.
//
// What this does not do (yet): free a unit's gathered weights between uses. The full-size
// buffer stays resident, so memory for weights is that of replication; state and gradients'
// optimizer work are 1/fsdp.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "maxctx/mesh/communicator.h"
#include "maxctx/parallel/model_plan.h"
#include "maxctx/parallel/weight_sharding.h"

namespace maxctx::parallel {

class ShardedParameters final : public WeightPlan {
 public:
  // `fsdp`: the fsdp axis; `replicas`: the axes over which gradients are summed besides fsdp
  // (data × context); `tensor`: the tensor axis (for the gradient norm of split tensors).
  ShardedParameters(const std::vector<WeightSpec>& specs, const Communicator& fsdp,
                    const Communicator& replicas, const Communicator& tensor);

  // The full (this tensor rank's) buffers the model reads and writes.
  float* full_params() { return full_params_.data(); }
  float* full_grads() { return full_grads_.data(); }
  int64_t full_size() const { return static_cast<int64_t>(full_params_.size()); }

  // This rank's shard: master weights, reduced gradients, AdamW moments (same layout).
  std::span<float> master() { return master_; }
  std::span<float> grad_shard() { return grad_shard_; }
  std::span<float> adam_m() { return adam_m_; }
  std::span<float> adam_v() { return adam_v_; }

  // Sets the master shard from a full buffer of this tensor rank's weights (initialisation,
  // checkpoint load); every rank passes the same full buffer.
  void set_from_full(std::span<const float> full_params, std::span<const float> full_m,
                     std::span<const float> full_v);
  // The full buffers assembled from every fsdp rank's shard (checkpoint save).
  void gather_full(std::vector<float>& params, std::vector<float>& m, std::vector<float>& v);

  // Starts a step: gradients zeroed, weights marked stale (the master shard changed).
  void begin_step();
  // sqrt(Σ g²) of the global gradient over all ranks' shards and tensor blocks, each element
  // counted once; needs every unit's gradients_ready.
  double global_grad_norm() const;

  void before_use(int unit) override;
  void gradients_ready(int unit) override;

 private:
  struct Unit {
    int64_t begin, end;                // in the full buffer
    int64_t shard_begin, shard_count;  // this rank's part, in the full buffer's coordinates
    int64_t shard_offset;              // where that part sits in master_ / grad_shard_
  };

  std::vector<WeightSpec> specs_;
  const Communicator& fsdp_;
  const Communicator& replicas_;
  const Communicator& tensor_;
  std::vector<Unit> units_;
  std::vector<bool> gathered_;
  std::vector<float> full_params_, full_grads_;
  std::vector<float> master_, grad_shard_, adam_m_, adam_v_;
};

}  // namespace maxctx::parallel

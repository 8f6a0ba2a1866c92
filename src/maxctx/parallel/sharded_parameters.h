// Parameters, gradients and optimizer state under data, fsdp and context parallelism (ZeRO-3
// over the shard group, fsdp × context as MaxText shards them: parallelize.h's
// kParameterShardAxes; replication over `data`), and the gradient reduction. Below, "the
// shard group" is that group of ranks, `shard_group` in the code.
//
// The flat parameter buffer (model/weights.h layout, this tensor rank's blocks) is cut into the
// model's weight units (embedding, each layer, head); every unit is split over the shard group's
// ranks by split_counts, and each rank owns one shard of each: the master weights and the AdamW
// moments (in weight_dtype: f32, or bf16 as MaxText stores them with weight_dtype=bfloat16)
// exist only for that shard; gradients are f32 throughout, reduced in f32. In a step, a unit's
// full weights are all-gathered over the shard group just before the model uses them
// (WeightPlan::before_use) and freed as soon as it is done with them (after_use): the forward
// gathers each unit once, the backward gathers it again. As soon as the backward has finished a
// unit its gradients are reduce-scattered over the shard group (which sums the context ranks'
// contributions too), summed over the replica axes (data × expert; an expert's weights, which
// only its expert rank holds, over data) and freed: every rank ends with the gradient of the global
// loss for its shard. With one rank in the shard group the shard is the whole model: the full
// buffers are the master weights and the reduced gradients themselves (no gather, no
// reduce-scatter, nothing freed), and only the replica sum remains. (A copy per unit would cost a
// page-faulting memcpy of the model twice a step.)
//
// Memory: the full parameter and gradient buffers are address space of the whole model's size
// (Kernels::empty_reserved) whose pages hold memory only while a unit is in use: committed by
// before_use and before_gradients, decommitted by after_use and gradients_ready (on a GPU the
// device's physical memory is mapped and unmapped; the model's views stay valid), so what a
// rank holds is its shards (1/(fsdp × context) of the
// weights, both moments and the gradients) plus the one or two units in use: the unit being
// computed, and in the backward its gradients. The gather is not overlapped with compute (no
// prefetch).
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "maxctx/kernels/host_transfer.h"
#include "maxctx/mesh/communicator.h"
#include "maxctx/mesh/traffic.h"
#include "maxctx/parallel/model_plan.h"
#include "maxctx/parallel/weight_sharding.h"

namespace maxctx::parallel {

class ShardedParameters final : public WeightPlan {
 public:
  // Consecutive elements of a unit that are all experts' weights, or all not.
  struct Run {
    int64_t begin, end;  // in the full buffer
    bool experts;
  };
  // One weight unit in the full buffer and this rank's part of it.
  struct Unit {
    int64_t begin, end;                // in the full buffer
    int64_t shard_begin, shard_count;  // this rank's part, in the full buffer's coordinates
    int64_t shard_offset;              // where that part sits in master_ / grad_shard_
    std::vector<Run> runs;             // the unit cut into expert and non-expert runs
  };
  // One gradient sum over the replica axes: elements [begin, begin + count) of a unit's shard,
  // all experts' weights or none.
  struct ReplicaSum {
    int64_t begin, count;
    bool experts;
  };
  // What gradients_ready sums for `unit`: its whole shard, or under the expert axis each run's
  // part of it (the experts' over fewer ranks).
  static std::vector<ReplicaSum> replica_sums(const Unit& unit, bool expert_axis);
  // The units of `specs` split over `shard_ranks` ranks, as rank `shard_rank` holds them: what the
  // constructor allocates from, and what `maxctx plan` counts.
  static std::vector<Unit> shard_units(const std::vector<WeightSpec>& specs, int shard_ranks,
                                       int shard_rank);
  // What the verbs below send, for `maxctx plan` (names: the axes' trace names, traffic.h):
  // before_use of `unit` when not gathered, gradients_ready of it, global_grad_norm.
  static void add_gather_traffic(Traffic& traffic, const Unit& unit, DType weight_dtype,
                                 const std::string& shard_axes);
  // (`expert_replica_axes`, `expert_axis`: the groups of the constructor's expert_replicas and
  // expert; "self" where they have one rank.)
  static void add_gradient_traffic(Traffic& traffic, const Unit& unit,
                                   const std::string& shard_axes, const std::string& replica_axes,
                                   const std::string& expert_replica_axes,
                                   const std::string& expert_axis);
  static void add_grad_norm_traffic(Traffic& traffic, const std::string& shard_axes,
                                    const std::string& tensor_axis, const std::string& expert_axis);

  // `shard_group`: fsdp × context; `replicas`: the axes over which gradients are
  // summed besides it (data × expert); `expert_replicas`: those for the experts' weights, which
  // each expert rank holds for its own experts (data); `expert`: the expert axis and
  // `tensor` the tensor axis (for the gradient norm of split tensors). Buffers are allocated
  // through `kernels`; weights and moments in `weight_dtype`.
  ShardedParameters(const std::vector<WeightSpec>& specs, const Communicator& shard_group,
                    const Communicator& replicas, const Communicator& expert_replicas,
                    const Communicator& expert, const Communicator& tensor,
                    const kernels::Kernels& kernels, DType weight_dtype);

  // The full (this tensor rank's) buffers the model reads and writes: only the units in use hold
  // values (and memory); the rest read as zero.
  TensorView full_params() const { return full_params_view_; }
  TensorView full_grads() const { return full_grads_view_; }
  int64_t full_size() const { return full_params_view_.numel(); }
  DType weight_dtype() const { return master_.dtype(); }
  // One rank in the shard group: the full buffers are the shard's (master weights, reduced
  // gradients).
  bool full_is_shard() const { return full_is_shard_; }

  // This rank's shard: master weights, reduced gradients (f32), AdamW moments (same layout).
  TensorView master() const { return master_.view(); }
  TensorView grad_shard() const { return grad_shard_.view(); }
  TensorView adam_m() const { return adam_m_.view(); }
  TensorView adam_v() const { return adam_v_.view(); }

  // This rank's part of each unit: what it owns, and so what it saves and restores.
  const std::vector<Unit>& units() const { return units_; }
  // Sets the master shard to `values(begin, out)`: the f32 values of full-buffer elements
  // [begin, begin + out.size()), rounded to weight_dtype; zero moments. An initialisation that
  // never holds more than one unit's shard on the host (model::init_weight_range).
  void initialise_shard(const std::function<void(int64_t begin, std::span<float> out)>& values);
  // The full buffers (weight_dtype) assembled from every shard group rank's shard (checkpoint
  // save).
  void gather_full(Tensor& params, Tensor& m, Tensor& v);

  // Starts a step: gradients zeroed, weights marked stale (the master shard changed).
  void begin_step();
  // sqrt(Σ g²) of the global gradient over all ranks' shards and tensor blocks, each element
  // counted once; needs every unit's gradients_ready.
  double global_grad_norm() const;

  void before_use(int unit) override;
  void after_use(int unit) override;
  void before_gradients(int unit) override;
  void gradients_ready(int unit) override;

  // Measure the full buffers' resident pages whenever a unit is freed from now on (for
  // memory_use's peak_unit_bytes). Off by default: a measurement walks both full buffers'
  // pages (mincore), ~30 times a step, which a training step need not pay.
  void track_unit_memory() { track_unit_memory_ = true; }
  // What the parameters, gradients and optimizer state hold on this rank, in bytes: the shards
  // (master weights, both moments, the reduced gradients), and the most that the full buffers'
  // units in use held at once since track_unit_memory (resident pages; 0 without it).
  struct MemoryUse {
    int64_t shard_bytes = 0;
    int64_t peak_unit_bytes = 0;
  };
  MemoryUse memory_use() const;

 private:
  std::vector<WeightSpec> specs_;
  const kernels::Kernels& kernels_;
  const Communicator& shard_group_;
  const Communicator& replicas_;
  const Communicator& expert_replicas_;
  const Communicator& expert_;
  const Communicator& tensor_;
  std::vector<Unit> units_;
  // The resident bytes of the full buffers now, folded into peak_unit_bytes_.
  void measure_units();

  std::vector<bool> gathered_;        // per unit: its weights committed and gathered
  std::vector<bool> gradients_open_;  // per unit: its gradients committed (before_gradients)
  bool full_is_shard_ = false;
  Tensor full_params_, full_grads_;  // empty when full_is_shard_
  TensorView full_params_view_, full_grads_view_;
  bool track_unit_memory_ = false;
  int64_t peak_unit_bytes_ = 0;
  Tensor master_, grad_shard_, adam_m_, adam_v_;

  // The gradient norm's terms: one per (unit, weight) range of the shard, in the order the norm
  // adds them, each summed on the backend into its own slot of norm_terms_ and read back
  // together (global_grad_norm: one readback per step).
  enum class NormTerm : unsigned char { kSplit, kReplicated, kExpert };
  struct NormRange {
    int64_t offset = 0;  // in the shard
    int64_t count = 0;
    NormTerm term = NormTerm::kSplit;
  };
  std::vector<NormRange> norm_ranges() const;  // from units_ and specs_, once
  std::vector<NormRange> norm_ranges_;
  mutable kernels::DeviceDoubles norm_terms_;  // one slot per norm range
};

}  // namespace maxctx::parallel

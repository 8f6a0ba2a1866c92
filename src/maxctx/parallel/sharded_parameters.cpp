#include "maxctx/parallel/sharded_parameters.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "maxctx/core/check.h"
#include "maxctx/kernels/host_transfer.h"

namespace maxctx::parallel {

namespace {

// [begin, end) cut where the specs switch between experts' weights and the rest.
std::vector<ShardedParameters::Run> runs_of(const std::vector<WeightSpec>& specs, int64_t begin,
                                            int64_t end) {
  std::vector<ShardedParameters::Run> runs;
  for (const WeightSpec& s : specs) {
    if (s.numel() == 0 || s.offset < begin || s.offset >= end) continue;
    if (!runs.empty() && runs.back().experts == s.expert_weight()) {
      runs.back().end = s.offset + s.numel();
    } else {
      runs.push_back({s.offset, s.offset + s.numel(), s.expert_weight()});
    }
  }
  return runs;
}

// A unit's part of a full buffer.
TensorView unit_range(const Tensor& full, const ShardedParameters::Unit& u) {
  return full.view().elements(u.begin, u.end - u.begin);
}

}  // namespace

ShardedParameters::ShardedParameters(const std::vector<WeightSpec>& specs,
                                     const Communicator& shard_group, const Communicator& replicas,
                                     const Communicator& expert_replicas,
                                     const Communicator& expert, const Communicator& tensor,
                                     const kernels::Kernels& kernels, DType weight_dtype)
    : specs_(specs),
      kernels_(kernels),
      shard_group_(shard_group),
      replicas_(replicas),
      expert_replicas_(expert_replicas),
      expert_(expert),
      tensor_(tensor),
      units_(shard_units(specs, shard_group.size(), shard_group.rank())),
      norm_ranges_(norm_ranges()) {
  norm_terms_.reserve(kernels, static_cast<int64_t>(norm_ranges_.size()));
  const int64_t shard_total =
      units_.empty() ? 0 : units_.back().shard_offset + units_.back().shard_count;
  gathered_.assign(units_.size(), false);
  gradients_open_.assign(units_.size(), false);
  const int64_t total = total_numel(specs);
  master_ = kernels.empty({shard_total}, weight_dtype);
  grad_shard_ = kernels.empty({shard_total}, DType::kF32);
  adam_m_ = kernels.empty({shard_total}, weight_dtype);
  adam_v_ = kernels.empty({shard_total}, weight_dtype);
  full_is_shard_ = shard_group.size() == 1;
  if (full_is_shard_) {
    // One rank's shard of every unit is the whole unit, in the full buffer's order.
    MAXCTX_CHECK_EQ(shard_total, total, "one-rank shard size");
    for (const Unit& u : units_) MAXCTX_CHECK_EQ(u.shard_offset, u.begin, "one-rank unit offset");
    full_params_view_ = master_.view();
    full_grads_view_ = grad_shard_.view();
    return;
  }
  // Address space only: a unit's range is committed while it is gathered or its gradients are
  // being written, and decommitted again right after (before_use .. after_use,
  // before_gradients .. gradients_ready).
  full_params_ = kernels.empty_reserved({total}, weight_dtype);
  full_grads_ = kernels.empty_reserved({total}, DType::kF32);
  full_params_view_ = full_params_.view();
  full_grads_view_ = full_grads_.view();
}

std::vector<ShardedParameters::Unit> ShardedParameters::shard_units(
    const std::vector<WeightSpec>& specs, int shard_ranks, int shard_rank) {
  std::vector<Unit> units;
  int64_t shard_total = 0;
  for (const FlatRange& r : weight_units(specs)) {
    const int64_t n = r.end - r.begin;
    const int64_t count = split_count(n, shard_ranks, shard_rank);
    units.push_back({r.begin, r.end, r.begin + split_offset(n, shard_ranks, shard_rank), count,
                     shard_total, runs_of(specs, r.begin, r.end)});
    shard_total += count;
  }
  return units;
}

std::vector<ShardedParameters::ReplicaSum> ShardedParameters::replica_sums(const Unit& u,
                                                                           bool expert_axis) {
  if (!expert_axis) return {{0, u.shard_count, false}};
  // Every expert rank has the same layout and shard split, so the same runs meet in each
  // collective; an expert's gradient is whole on its rank, the rest is summed over expert.
  std::vector<ReplicaSum> sums;
  for (const Run& run : u.runs) {
    const int64_t begin = std::max(run.begin, u.shard_begin);
    const int64_t end = std::min(run.end, u.shard_begin + u.shard_count);
    if (begin < end) sums.push_back({begin - u.shard_begin, end - begin, run.experts});
  }
  return sums;
}

void ShardedParameters::add_gather_traffic(Traffic& traffic, const Unit& u, DType weight_dtype,
                                           const std::string& shard_axes) {
  const int64_t bytes = (u.end - u.begin) * static_cast<int64_t>(dtype_size(weight_dtype));
  traffic.add(shard_axes, CollectiveKind::kAllGather, bytes);
}

void ShardedParameters::add_gradient_traffic(Traffic& traffic, const Unit& u,
                                             const std::string& shard_axes,
                                             const std::string& replica_axes,
                                             const std::string& expert_replica_axes,
                                             const std::string& expert_axis) {
  const auto f32 = static_cast<int64_t>(sizeof(float));
  traffic.add(shard_axes, CollectiveKind::kReduceScatter, (u.end - u.begin) * f32);
  for (const ReplicaSum& sum : replica_sums(u, expert_axis != "self")) {
    traffic.add(sum.experts ? expert_replica_axes : replica_axes, CollectiveKind::kAllReduce,
                sum.count * f32);
  }
}

void ShardedParameters::add_grad_norm_traffic(Traffic& traffic, const std::string& shard_axes,
                                              const std::string& tensor_axis,
                                              const std::string& expert_axis) {
  const bool experts = expert_axis != "self";
  traffic.add(shard_axes, CollectiveKind::kAllReduce, (experts ? 3 : 2) * sizeof(double));
  if (experts) traffic.add(expert_axis, CollectiveKind::kAllReduce, sizeof(double));
  traffic.add(tensor_axis, CollectiveKind::kAllReduce, sizeof(double));
}

void ShardedParameters::initialise_shard(
    const std::function<void(int64_t begin, std::span<float> out)>& values) {
  kernels_.fill_zero(adam_m_.view());
  kernels_.fill_zero(adam_v_.view());
  std::vector<float> part;
  for (const Unit& u : units_) {
    part.resize(static_cast<size_t>(u.shard_count));
    values(u.shard_begin, part);
    kernels::upload_floats(kernels_, master_.view().elements(u.shard_offset, u.shard_count), part);
  }
}

void ShardedParameters::gather_full(Tensor& params, Tensor& m, Tensor& v) {
  for (Tensor* t : {&params, &m, &v}) *t = kernels_.empty({full_size()}, weight_dtype());
  for (const Unit& u : units_) {
    const auto gather = [&](const Tensor& shard, Tensor& out) {
      shard_group_.all_gather_uneven(shard.view().elements(u.shard_offset, u.shard_count),
                                     out.view().elements(u.begin, u.end - u.begin),
                                     kernels_.stream());
    };
    gather(master_, params);
    gather(adam_m_, m);
    gather(adam_v_, v);
  }
}

void ShardedParameters::begin_step() {
  if (full_is_shard_) {
    // The gradients accumulate (+=) straight into the shard: zero it for this micro-batch.
    kernels_.fill_zero(grad_shard_.view());
    return;
  }
  // Every unit's gradients were decommitted by gradients_ready; a step that stopped early (an
  // exception between forward and backward) may have left some behind.
  for (size_t u = 0; u < units_.size(); ++u) {
    if (gathered_[u]) after_use(static_cast<int>(u));
    if (gradients_open_[u]) {
      kernels_.decommit(unit_range(full_grads_, units_[u]));
      gradients_open_[u] = false;
    }
  }
}

void ShardedParameters::before_use(int unit) {
  MAXCTX_CHECK(unit >= 0 && unit < static_cast<int>(units_.size()), "weight unit {}", unit);
  if (gathered_[unit] || full_is_shard_) return;
  const Unit& u = units_[unit];
  kernels_.commit(unit_range(full_params_, u));
  shard_group_.all_gather_uneven(master_.view().elements(u.shard_offset, u.shard_count),
                                 unit_range(full_params_, u), kernels_.stream());
  gathered_[unit] = true;
}

void ShardedParameters::after_use(int unit) {
  MAXCTX_CHECK(unit >= 0 && unit < static_cast<int>(units_.size()), "weight unit {}", unit);
  if (!gathered_[unit]) return;
  measure_units();
  kernels_.decommit(unit_range(full_params_, units_[unit]));
  gathered_[unit] = false;
}

void ShardedParameters::before_gradients(int unit) {
  MAXCTX_CHECK(unit >= 0 && unit < static_cast<int>(units_.size()), "weight unit {}", unit);
  if (full_is_shard_ || gradients_open_[unit]) return;
  kernels_.commit(unit_range(full_grads_, units_[unit]));
  gradients_open_[unit] = true;
}

void ShardedParameters::gradients_ready(int unit) {
  MAXCTX_CHECK(unit >= 0 && unit < static_cast<int>(units_.size()), "weight unit {}", unit);
  const Unit& u = units_[unit];
  const TensorView shard = grad_shard_.view().elements(u.shard_offset, u.shard_count);
  if (!full_is_shard_) {
    MAXCTX_CHECK(gradients_open_[unit], "weight unit {}: gradients_ready without before_gradients",
                 unit);
    shard_group_.reduce_scatter(unit_range(full_grads_, u), shard, kernels_.stream());
  }
  for (const ReplicaSum& sum : replica_sums(u, expert_.size() > 1)) {
    (sum.experts ? expert_replicas_ : replicas_)
        .all_reduce(shard.elements(sum.begin, sum.count), ReduceOp::kSum, kernels_.stream());
  }
  if (full_is_shard_) return;
  measure_units();
  // No longer resident; zero again when committed for the next accumulation.
  kernels_.decommit(unit_range(full_grads_, u));
  gradients_open_[unit] = false;
}

void ShardedParameters::measure_units() {
  if (!track_unit_memory_ || full_is_shard_) return;
  const Allocator& a = kernels_.allocator();
  const int64_t bytes = static_cast<int64_t>(
      a.resident_bytes(full_params_.view().raw(), full_params_.view().bytes()) +
      a.resident_bytes(full_grads_.view().raw(), full_grads_.view().bytes()));
  peak_unit_bytes_ = std::max(peak_unit_bytes_, bytes);
}

ShardedParameters::MemoryUse ShardedParameters::memory_use() const {
  MemoryUse m;
  for (const Tensor* t : {&master_, &grad_shard_, &adam_m_, &adam_v_}) {
    m.shard_bytes += static_cast<int64_t>(t->view().bytes());
  }
  m.peak_unit_bytes = peak_unit_bytes_;
  return m;
}

std::vector<ShardedParameters::NormRange> ShardedParameters::norm_ranges() const {
  // Tensor-split weights hold different blocks on each tensor rank (summed over tensor);
  // replicated ones hold the same values there (counted once). Under the expert axis the
  // experts' weights differ per expert rank too (summed over expert, then tensor).
  std::vector<NormRange> ranges;
  for (const Unit& u : units_) {
    const int64_t shard_end = u.shard_begin + u.shard_count;
    for (const WeightSpec& s : specs_) {
      const int64_t begin = std::max(u.shard_begin, s.offset);
      const int64_t end = std::min(shard_end, s.offset + s.numel());
      if (begin >= end) continue;
      const NormTerm term = s.expert_weight() && expert_.size() > 1 ? NormTerm::kExpert
                            : s.split == TensorSplit::kReplicated   ? NormTerm::kReplicated
                                                                    : NormTerm::kSplit;
      ranges.push_back({u.shard_offset + (begin - u.shard_begin), end - begin, term});
    }
  }
  return ranges;
}

double ShardedParameters::global_grad_norm() const {
  // Each range's Σ g² in element order on the backend, then one readback of all the terms,
  // added on the host in range order.
  const auto count = static_cast<int64_t>(norm_ranges_.size());
  for (int64_t i = 0; i < count; ++i) {
    const NormRange& r = norm_ranges_[static_cast<size_t>(i)];
    kernels_.sum_of_squares(norm_terms_.slot(i), grad_shard_.view().elements(r.offset, r.count));
  }
  const std::vector<double> terms = norm_terms_.read(kernels_, count);
  double sums[3] = {0.0, 0.0, 0.0};  // split, replicated, expert (NormTerm's order)
  for (int64_t i = 0; i < count; ++i) {
    sums[static_cast<int>(norm_ranges_[static_cast<size_t>(i)].term)] +=
        terms[static_cast<size_t>(i)];
  }
  const bool experts = expert_.size() > 1;
  shard_group_.all_reduce(std::span<double>(sums, experts ? 3 : 2), ReduceOp::kSum);
  if (experts) {
    expert_.all_reduce(std::span<double>(sums + 2, 1), ReduceOp::kSum);
    sums[0] += sums[2];
  }
  tensor_.all_reduce(std::span<double>(sums, 1), ReduceOp::kSum);
  return std::sqrt(sums[0] + sums[1]);
}

}  // namespace maxctx::parallel

#include "maxctx/parallel/sharded_parameters.h"

#include <algorithm>
#include <cmath>

#include "maxctx/core/check.h"

namespace maxctx::parallel {

ShardedParameters::ShardedParameters(const std::vector<WeightSpec>& specs, const Communicator& fsdp,
                                     const Communicator& replicas, const Communicator& tensor)
    : specs_(specs), fsdp_(fsdp), replicas_(replicas), tensor_(tensor) {
  int64_t shard_total = 0;
  for (const FlatRange& r : weight_units(specs)) {
    const int64_t n = r.end - r.begin;
    const int64_t count = split_count(n, fsdp.size(), fsdp.rank());
    units_.push_back(
        {r.begin, r.end, r.begin + split_offset(n, fsdp.size(), fsdp.rank()), count, shard_total});
    shard_total += count;
  }
  gathered_.assign(units_.size(), false);
  full_params_.assign(total_numel(specs), 0.0f);
  full_grads_.assign(full_params_.size(), 0.0f);
  master_.assign(shard_total, 0.0f);
  grad_shard_.assign(shard_total, 0.0f);
  adam_m_.assign(shard_total, 0.0f);
  adam_v_.assign(shard_total, 0.0f);
}

void ShardedParameters::set_from_full(std::span<const float> full_params,
                                      std::span<const float> full_m,
                                      std::span<const float> full_v) {
  MAXCTX_CHECK_EQ(full_params.size(), full_params_.size(), "full parameter buffer size");
  for (const Unit& u : units_) {
    std::copy_n(full_params.begin() + u.shard_begin, u.shard_count,
                master_.begin() + u.shard_offset);
    if (!full_m.empty()) {
      std::copy_n(full_m.begin() + u.shard_begin, u.shard_count, adam_m_.begin() + u.shard_offset);
      std::copy_n(full_v.begin() + u.shard_begin, u.shard_count, adam_v_.begin() + u.shard_offset);
    }
  }
  std::fill(gathered_.begin(), gathered_.end(), false);
}

void ShardedParameters::gather_full(std::vector<float>& params, std::vector<float>& m,
                                    std::vector<float>& v) {
  params.resize(full_params_.size());
  m.resize(full_params_.size());
  v.resize(full_params_.size());
  for (const Unit& u : units_) {
    const auto gather = [&](const std::vector<float>& shard, std::vector<float>& out) {
      fsdp_.all_gather_uneven(std::span<const float>(shard.data() + u.shard_offset, u.shard_count),
                              std::span<float>(out.data() + u.begin, u.end - u.begin));
    };
    gather(master_, params);
    gather(adam_m_, m);
    gather(adam_v_, v);
  }
}

void ShardedParameters::begin_step() {
  std::fill(full_grads_.begin(), full_grads_.end(), 0.0f);
  std::fill(gathered_.begin(), gathered_.end(), false);
}

void ShardedParameters::before_use(int unit) {
  MAXCTX_CHECK(unit >= 0 && unit < static_cast<int>(units_.size()), "weight unit {}", unit);
  if (gathered_[unit]) return;
  const Unit& u = units_[unit];
  fsdp_.all_gather_uneven(std::span<const float>(master_.data() + u.shard_offset, u.shard_count),
                          std::span<float>(full_params_.data() + u.begin, u.end - u.begin));
  gathered_[unit] = true;
}

void ShardedParameters::gradients_ready(int unit) {
  MAXCTX_CHECK(unit >= 0 && unit < static_cast<int>(units_.size()), "weight unit {}", unit);
  const Unit& u = units_[unit];
  const std::span<float> shard(grad_shard_.data() + u.shard_offset, u.shard_count);
  fsdp_.reduce_scatter(std::span<const float>(full_grads_.data() + u.begin, u.end - u.begin),
                       shard);
  replicas_.all_reduce(shard, ReduceOp::kSum);
}

double ShardedParameters::global_grad_norm() const {
  // Tensor-split weights hold different blocks on each tensor rank (summed over tensor);
  // replicated ones hold the same values there (counted once).
  double split_sum = 0.0;
  double replicated_sum = 0.0;
  for (const Unit& u : units_) {
    const int64_t shard_end = u.shard_begin + u.shard_count;
    for (const WeightSpec& s : specs_) {
      const int64_t begin = std::max(u.shard_begin, s.offset);
      const int64_t end = std::min(shard_end, s.offset + s.numel());
      double sum = 0.0;
      for (int64_t i = begin; i < end; ++i) {
        const double g = grad_shard_[u.shard_offset + (i - u.shard_begin)];
        sum += g * g;
      }
      (s.split == TensorSplit::kReplicated ? replicated_sum : split_sum) += sum;
    }
  }
  double sums[2] = {split_sum, replicated_sum};
  fsdp_.all_reduce(std::span<double>(sums, 2), ReduceOp::kSum);
  tensor_.all_reduce(std::span<double>(sums, 1), ReduceOp::kSum);
  return std::sqrt(sums[0] + sums[1]);
}

}  // namespace maxctx::parallel

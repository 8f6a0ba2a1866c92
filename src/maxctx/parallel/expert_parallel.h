// The expert axis: the exchange of a mixture of experts' rows (model_plan.h ExpertExchange)
// over the mesh's `expert` communicator, two all_to_all(v)s per use; and the reassembly of the
// whole experts from the expert ranks' weights (checkpoints, gathered parameters).
#pragma once

#include <vector>

#include "maxctx/mesh/communicator.h"
#include "maxctx/parallel/model_plan.h"
#include "maxctx/parallel/weight_sharding.h"

namespace maxctx::parallel {

class ExpertAllToAll final : public ExpertExchange {
 public:
  explicit ExpertAllToAll(const Communicator& expert) : expert_(expert) {}
  int rank() const override { return expert_.rank(); }
  int ranks() const override { return expert_.size(); }
  void exchange_counts(std::span<const int64_t> send, std::span<int64_t> recv) override;
  void exchange_rows(TensorView in, std::span<const int64_t> send_rows, TensorView out,
                     std::span<const int64_t> recv_rows) override;

 private:
  const Communicator& expert_;
  std::vector<int64_t> send_elements_, recv_elements_;
};

// `global` (the unsharded layout of global_specs) holds this expert rank's experts; the other
// experts' tensors are filled in from the ranks that hold them (local_specs: this rank's, the
// same tensors in the same order). Collective over `expert`; a no-op when it has one rank.
void gather_experts(TensorView global, const std::vector<WeightSpec>& global_specs,
                    const std::vector<WeightSpec>& local_specs, const Communicator& expert);

}  // namespace maxctx::parallel

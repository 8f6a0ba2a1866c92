// The expert axis: the exchange of a mixture of experts' rows (model_plan.h ExpertExchange)
// over the mesh's `expert` communicator, two all_to_all(v)s per use; and the reassembly of the
// whole experts from the expert ranks' weights (checkpoints, gathered parameters).
#pragma once

#include <string>
#include <vector>

#include "maxctx/core/stream.h"
#include "maxctx/mesh/communicator.h"
#include "maxctx/mesh/traffic.h"
#include "maxctx/parallel/model_plan.h"
#include "maxctx/parallel/weight_sharding.h"

namespace maxctx::parallel {

class ExpertAllToAll final : public ExpertExchange {
 public:
  // stream: what the exchanged rows' kernels run on (Kernels::stream()).
  ExpertAllToAll(const Communicator& expert, Stream stream) : expert_(expert), stream_(stream) {}
  int rank() const override { return expert_.rank(); }
  int ranks() const override { return expert_.size(); }
  void exchange_counts(std::span<const int64_t> send, std::span<int64_t> recv) override;
  void exchange_rows(TensorView in, std::span<const int64_t> send_rows, TensorView out,
                     std::span<const int64_t> recv_rows) override;

  // What a mixture-of-experts layer sends over the axis named `axis`, for `maxctx plan`: its
  // forward exchanges the per-expert counts, then `rows` dispatch rows of `width` in `dtype` go
  // out and their f32 outputs come back; its backward sends the rows' f32 gradients out and the
  // f32 input gradients back. The rows a rank gets back are the ones its experts received, which
  // the router decides: counted at their mean over the ranks, `rows` (each rank sends `rows`).
  static void add_forward_traffic(Traffic& traffic, const std::string& axis, int64_t num_experts,
                                  int64_t rows, int64_t width, DType dtype);
  static void add_backward_traffic(Traffic& traffic, const std::string& axis, int64_t rows,
                                   int64_t width);

 private:
  const Communicator& expert_;
  Stream stream_;
  std::vector<int64_t> send_elements_, recv_elements_;
};

// `global` (the unsharded layout of global_specs) holds this expert rank's experts; the other
// experts' tensors are filled in from the ranks that hold them (local_specs: this rank's, the
// same tensors in the same order). Collective over `expert`; a no-op when it has one rank.
void gather_experts(TensorView global, const std::vector<WeightSpec>& global_specs,
                    const std::vector<WeightSpec>& local_specs, const Communicator& expert);

}  // namespace maxctx::parallel

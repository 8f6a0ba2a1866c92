// The tensor-axis all-reduce of Megatron tensor parallelism: row-parallel projections (o_proj,
// down_proj) each produce a partial sum of the output, and the input gradients of
// column-parallel ones (q, k, v, gate, up) are partial sums too; this sums them over `tensor`.
#pragma once

#include <span>
#include <vector>

#include "maxctx/core/stream.h"
#include "maxctx/mesh/communicator.h"
#include "maxctx/parallel/model_plan.h"
#include "maxctx/parallel/weight_sharding.h"

namespace maxctx::parallel {

class TensorAllReduce final : public TensorReducer {
 public:
  // stream: what the summed activations' kernels run on (Kernels::stream()).
  TensorAllReduce(const Communicator& tensor, Stream stream) : tensor_(tensor), stream_(stream) {}
  void all_reduce_sum(TensorView values) override;

 private:
  const Communicator& tensor_;
  Stream stream_;
};

// Between the unsharded flat layout (specs built with tensor size 1) and this tensor rank's
// (local_specs, the same tensors in the same order): local_blocks cuts this rank's rows or
// columns out of every tensor; gather_blocks reassembles the whole tensors from every tensor
// rank's blocks (collective over `tensor`).
// Both allocate their result through `kernels`, in the input's dtype.
Tensor local_blocks(const kernels::Kernels& kernels, TensorView global,
                    const std::vector<WeightSpec>& global_specs,
                    const std::vector<WeightSpec>& local_specs);
Tensor gather_blocks(const kernels::Kernels& kernels, TensorView local,
                     const std::vector<WeightSpec>& global_specs,
                     const std::vector<WeightSpec>& local_specs, const Communicator& tensor);

}  // namespace maxctx::parallel

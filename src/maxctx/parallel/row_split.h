// The row split of a sequence-sharded decode step over `context_autoregressive` (see
// RowSplit in model_plan.h): every rank holds the same tokens, computes its rows of the MLP and
// head projections, and one all-gather per projection assembles the outputs. It pays because a
// decode step is memory-bound: each rank streams 1/ca of the MLP and head weights, which for
// Llama are about two thirds of a step's weight bytes, for two all-gathers of a few KiB per
// layer.
#pragma once

#include <cstdint>

#include "maxctx/mesh/communicator.h"
#include "maxctx/parallel/model_plan.h"

namespace maxctx::parallel {

class AxisRowSplit final : public RowSplit {
 public:
  AxisRowSplit(const Communicator& axis, const kernels::Kernels& kernels)
      : axis_(axis), kernels_(kernels) {}

  RowSplitPart part() const override { return {axis_.rank(), axis_.size()}; }
  void gather(TensorView out, TensorView mine) override;

 private:
  const Communicator& axis_;
  const kernels::Kernels& kernels_;
  Tensor send_;  // (N, widest part) this rank's rows, padded
  Tensor recv_;  // (ranks, N, widest part)
};

// TokenRowSplit over an axis: an all-gather of the input rows, and one all_to_all of the output
// columns (each rank's part padded to the widest), both in the activations' dtype.
class AxisTokenRowSplit final : public TokenRowSplit {
 public:
  AxisTokenRowSplit(const Communicator& axis, const kernels::Kernels& kernels)
      : axis_(axis), kernels_(kernels) {}

  RowSplitPart part() const override { return {axis_.rank(), axis_.size()}; }
  void gather_inputs(TensorView all, TensorView mine) override;
  void return_outputs(TensorView out, TensorView computed) override;

 private:
  const Communicator& axis_;
  const kernels::Kernels& kernels_;
  Tensor send_;  // (ranks, N, widest part) this rank's columns of every rank's tokens
  Tensor recv_;  // (ranks, N, widest part) every rank's columns of this rank's tokens
};

}  // namespace maxctx::parallel

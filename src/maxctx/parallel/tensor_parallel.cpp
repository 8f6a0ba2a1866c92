#include "maxctx/parallel/tensor_parallel.h"

#include "maxctx/core/check.h"

namespace maxctx::parallel {

void TensorAllReduce::all_reduce_sum(TensorView values) {
  if (tensor_.size() == 1) return;
  tensor_.all_reduce(values, ReduceOp::kSum, stream_);
}

Tensor local_blocks(const kernels::Kernels& kernels, TensorView global,
                    const std::vector<WeightSpec>& global_specs,
                    const std::vector<WeightSpec>& local_specs) {
  MAXCTX_CHECK_EQ(global_specs.size(), local_specs.size(), "specs of different models");
  Tensor local = kernels.empty({total_numel(local_specs)}, global.dtype());
  for (size_t i = 0; i < local_specs.size(); ++i) {
    const WeightSpec& g = global_specs[i];
    const WeightSpec& s = local_specs[i];
    for (int64_t r = 0; r < s.rows; ++r) {
      kernels.copy(local.view().elements(s.offset + r * s.cols, s.cols),
                   global.elements(g.offset + (s.row_offset + r) * g.cols + s.col_offset, s.cols));
    }
  }
  return local;
}

Tensor gather_blocks(const kernels::Kernels& kernels, TensorView local,
                     const std::vector<WeightSpec>& global_specs,
                     const std::vector<WeightSpec>& local_specs, const Communicator& tensor) {
  MAXCTX_CHECK_EQ(global_specs.size(), local_specs.size(), "specs of different models");
  const int tp = tensor.size();
  Tensor global = kernels.empty({total_numel(global_specs)}, local.dtype());
  Tensor blocks;
  for (size_t i = 0; i < local_specs.size(); ++i) {
    const WeightSpec& g = global_specs[i];
    const WeightSpec& s = local_specs[i];
    kernels.reserve(blocks, s.numel() * tp, local.dtype());
    const TensorView gathered = blocks.view().elements(0, s.numel() * tp);
    tensor.all_gather(local.elements(s.offset, s.numel()), gathered, kernels.stream());
    for (int t = 0; t < tp; ++t) {
      if (s.split == TensorSplit::kReplicated && t > 0) break;
      const int64_t row0 = s.split == TensorSplit::kRows ? t * s.rows : 0;
      const int64_t col0 = s.split == TensorSplit::kCols ? t * s.cols : 0;
      for (int64_t r = 0; r < s.rows; ++r) {
        kernels.copy(global.view().elements(g.offset + (row0 + r) * g.cols + col0, s.cols),
                     gathered.elements(t * s.numel() + r * s.cols, s.cols));
      }
    }
  }
  return global;
}

}  // namespace maxctx::parallel

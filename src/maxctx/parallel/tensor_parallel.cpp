#include "maxctx/parallel/tensor_parallel.h"

#include <algorithm>
#include <span>

#include "maxctx/core/check.h"

namespace maxctx::parallel {

void TensorAllReduce::all_reduce_sum(TensorView values) {
  if (tensor_.size() == 1) return;
  tensor_.all_reduce(values, ReduceOp::kSum);
}

std::vector<float> local_blocks(std::span<const float> global,
                                const std::vector<WeightSpec>& global_specs,
                                const std::vector<WeightSpec>& local_specs) {
  MAXCTX_CHECK_EQ(global_specs.size(), local_specs.size(), "specs of different models");
  std::vector<float> local(total_numel(local_specs));
  for (size_t i = 0; i < local_specs.size(); ++i) {
    const WeightSpec& g = global_specs[i];
    const WeightSpec& s = local_specs[i];
    for (int64_t r = 0; r < s.rows; ++r) {
      const float* row = global.data() + g.offset + (s.row_offset + r) * g.cols + s.col_offset;
      std::copy(row, row + s.cols, local.begin() + s.offset + r * s.cols);
    }
  }
  return local;
}

std::vector<float> gather_blocks(std::span<const float> local,
                                 const std::vector<WeightSpec>& global_specs,
                                 const std::vector<WeightSpec>& local_specs,
                                 const Communicator& tensor) {
  MAXCTX_CHECK_EQ(global_specs.size(), local_specs.size(), "specs of different models");
  const int tp = tensor.size();
  std::vector<float> global(total_numel(global_specs));
  std::vector<float> blocks;
  for (size_t i = 0; i < local_specs.size(); ++i) {
    const WeightSpec& g = global_specs[i];
    const WeightSpec& s = local_specs[i];
    blocks.resize(s.numel() * tp);
    tensor.all_gather(local.subspan(s.offset, s.numel()), std::span<float>(blocks));
    for (int t = 0; t < tp; ++t) {
      if (s.split == TensorSplit::kReplicated && t > 0) break;
      const int64_t row0 = s.split == TensorSplit::kRows ? t * s.rows : 0;
      const int64_t col0 = s.split == TensorSplit::kCols ? t * s.cols : 0;
      for (int64_t r = 0; r < s.rows; ++r) {
        const float* row = blocks.data() + t * s.numel() + r * s.cols;
        std::copy(row, row + s.cols, global.begin() + g.offset + (row0 + r) * g.cols + col0);
      }
    }
  }
  return global;
}

}  // namespace maxctx::parallel

#include "maxctx/parallel/weight_sharding.h"

#include <algorithm>

#include "maxctx/core/check.h"

namespace maxctx::parallel {

TensorSplit tensor_split_of(WeightRole role) {
  switch (role) {
    case WeightRole::kHeadsOrHidden:
      return TensorSplit::kRows;  // column-parallel: each rank its heads / hidden units
    case WeightRole::kIntoResidual:
      return TensorSplit::kCols;  // row-parallel: partial sums, all-reduced over `tensor`
    case WeightRole::kNorm:
    case WeightRole::kEmbedding:
    case WeightRole::kOutputHead:
    case WeightRole::kRouter:  // every rank routes its tokens over all experts
      break;
  }
  return TensorSplit::kReplicated;
}

ExpertRange local_experts(int64_t num_experts, int ep_size, int ep_rank) {
  MAXCTX_CHECK(ep_size >= 1 && ep_rank >= 0 && ep_rank < ep_size && num_experts % ep_size == 0,
               "expert rank {} of {} over {} experts", ep_rank, ep_size, num_experts);
  const int64_t count = num_experts / ep_size;
  return {ep_rank * count, count};
}

std::vector<WeightSpec> shard_weights(const std::vector<WeightDecl>& decls, int tp_size,
                                      int tp_rank, int ep_size, int ep_rank) {
  MAXCTX_CHECK(tp_size >= 1 && tp_rank >= 0 && tp_rank < tp_size, "tensor rank {} of {}", tp_rank,
               tp_size);
  int64_t num_experts = 0;
  for (const WeightDecl& d : decls) num_experts = std::max(num_experts, d.expert + 1);
  const ExpertRange mine =
      local_experts(num_experts == 0 ? ep_size : num_experts, ep_size, ep_rank);
  std::vector<WeightSpec> specs;
  int64_t offset = 0;
  for (const WeightDecl& d : decls) {
    const TensorSplit split = tensor_split_of(d.role);
    MAXCTX_CHECK((split != TensorSplit::kRows || d.rows % tp_size == 0) &&
                     (split != TensorSplit::kCols || d.cols % tp_size == 0),
                 "{} ({} x {}) does not split over tensor = {}", d.name, d.rows, d.cols, tp_size);
    const bool held = d.expert < 0 || mine.holds(d.expert);
    const int64_t local_rows = !held ? 0 : split == TensorSplit::kRows ? d.rows / tp_size : d.rows;
    const int64_t local_cols = split == TensorSplit::kCols ? d.cols / tp_size : d.cols;
    const int64_t row_offset = split == TensorSplit::kRows ? tp_rank * local_rows : 0;
    const int64_t col_offset = split == TensorSplit::kCols ? tp_rank * local_cols : 0;
    specs.push_back({d.name, d.layer, local_rows, local_cols, d.rows, d.cols, row_offset,
                     col_offset, d.role, split, d.init, offset, d.expert});
    offset += local_rows * local_cols;
  }
  return specs;
}

int64_t total_numel(const std::vector<WeightSpec>& specs) {
  return specs.empty() ? 0 : specs.back().offset + specs.back().numel();
}

FlatRange layer_range(const std::vector<WeightSpec>& specs, int layer) {
  FlatRange range{-1, -1};
  for (const WeightSpec& s : specs) {
    if (s.layer != layer) continue;
    if (range.begin < 0) range.begin = s.offset;
    MAXCTX_CHECK(range.end < 0 || range.end == s.offset, "layer {} is not contiguous", layer);
    range.end = s.offset + s.numel();
  }
  MAXCTX_CHECK(range.begin >= 0, "no weights for layer {}", layer);
  return range;
}

std::vector<FlatRange> weight_units(const std::vector<WeightSpec>& specs) {
  MAXCTX_CHECK(!specs.empty() && specs.front().layer == -1, "the embedding comes first");
  int num_layers = 0;
  for (const WeightSpec& s : specs) num_layers = std::max(num_layers, s.layer + 1);
  std::vector<FlatRange> units;
  units.push_back({0, specs.front().numel()});
  for (int l = 0; l < num_layers; ++l) units.push_back(layer_range(specs, l));
  const int64_t head_begin = num_layers > 0 ? units.back().end : units.front().end;
  units.push_back({head_begin, total_numel(specs)});
  return units;
}

std::vector<FlatSlice> flat_slices(const std::vector<WeightSpec>& specs, int64_t begin,
                                   int64_t end) {
  std::vector<FlatSlice> slices;
  for (size_t i = 0; i < specs.size(); ++i) {
    const WeightSpec& s = specs[i];
    const int64_t first = std::max(begin, s.offset) - s.offset;
    const int64_t last = std::min(end, s.offset + s.numel()) - s.offset;
    // Walk the block's elements [first, last): a row's tail, whole rows, a row's head.
    for (int64_t at = first; at < last;) {
      const int64_t r = at / s.cols;
      const int64_t c = at % s.cols;
      if (c != 0 || last - at < s.cols) {
        const int64_t n = std::min(s.cols - c, last - at);
        slices.push_back(
            {static_cast<int>(i), s.row_offset + r, s.col_offset + c, 1, n, s.offset + at});
        at += n;
      } else {
        const int64_t rows = (last - at) / s.cols;
        slices.push_back(
            {static_cast<int>(i), s.row_offset + r, s.col_offset, rows, s.cols, s.offset + at});
        at += rows * s.cols;
      }
    }
  }
  return slices;
}

bool saves_copy(const WeightSpec& spec, const ReplicaPosition& at) {
  if (at.data != 0) return false;
  if (spec.split == TensorSplit::kReplicated && at.tensor != 0) return false;
  return spec.expert_weight() || at.expert == 0;
}

}  // namespace maxctx::parallel

// The vocabulary split over `context_autoregressive` (VocabSplit in model_plan.h): each rank
// holds 1/ca of the embedding and head rows. An embedding lookup sends each token id to the rank
// holding its row and the row back (two all_to_allvs and one of counts), then puts the rows in
// token order with one gather; the head's rows are all-gathered, each rank computes its part of
// every row's logits and the parts are all-gathered (AxisRowSplit). What it is not: a split of
// the model's other weights (attention and dense MLP stay replicated over the axis).
#pragma once

#include <cstdint>
#include <vector>

#include "maxctx/kernels/host_transfer.h"
#include "maxctx/mesh/communicator.h"
#include "maxctx/parallel/model_plan.h"
#include "maxctx/parallel/row_split.h"

namespace maxctx::parallel {

class AxisVocabSplit final : public VocabSplit {
 public:
  AxisVocabSplit(const Communicator& axis, const kernels::Kernels& kernels, int64_t vocab_size)
      : axis_(axis), kernels_(kernels), vocab_size_(vocab_size), parts_(axis, kernels) {}

  RowSplitPart part() const override { return {axis_.rank(), axis_.size()}; }
  void embed(TensorView out, std::span<const int32_t> tokens, TensorView table_part) override;
  void gather_rows(TensorView out, TensorView mine) override;
  void gather(TensorView out, TensorView mine) override { parts_.gather(out, mine); }

 private:
  const Communicator& axis_;
  const kernels::Kernels& kernels_;
  int64_t vocab_size_;
  AxisRowSplit parts_;
  std::vector<int32_t> send_ids_;       // (N) the token ids grouped by the rank holding their row
  std::vector<int32_t> recv_ids_;       // the ids other ranks ask this rank for
  kernels::DeviceIndices local_ids_;    // recv_ids_ less this rank's first row
  kernels::DeviceIndices token_order_;  // (N) where token n's row arrived
  Tensor looked_up_;                    // (asked, E) the rows this rank sends
  Tensor arrived_;                      // (N, E) this rank's rows, grouped by sender
};

}  // namespace maxctx::parallel

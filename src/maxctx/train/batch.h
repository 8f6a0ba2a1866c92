// One batch of training rows as the model and the loss see it, with MaxText's five arrays.
//
// Attention reads segment_ids and positions (a query attends to a key iff their segment ids are
// equal and non-zero and pos_k <= pos_q); the loss reads targets and target_segment_ids (target
// i counts iff target_segment_ids[i] != 0). The two segmentations differ for the recall task,
// where only the answers are scored, and at the last token of every packed document.
// A Batch is either full rows (seq_len = S) or one context rank's shard (seq_len = S/cp, the
// columns of the dual chunk swap in that rank's order); positions travel with the tokens, so a
// shard never needs un-permuting. Invariant: every array has rows * seq_len elements.
#pragma once

#include <cstdint>
#include <vector>

namespace maxctx {

struct Batch {
  int64_t rows = 0;
  int64_t seq_len = 0;                      // columns of this batch: S, or S/cp for a shard
  std::vector<int32_t> tokens;              // (rows, seq_len) inputs
  std::vector<int32_t> targets;             // (rows, seq_len) the next token of the document
  std::vector<int32_t> positions;           // (rows, seq_len) inputs_position, 0 at a doc start
  std::vector<int32_t> segment_ids;         // (rows, seq_len) inputs_segmentation, 0 = padding
  std::vector<int32_t> target_segment_ids;  // (rows, seq_len) targets_segmentation, 0 = unscored

  Batch() = default;
  Batch(int64_t rows, int64_t seq_len);  // all zeros: padding everywhere
  int64_t size() const { return rows * seq_len; }
  friend bool operator==(const Batch&, const Batch&) = default;
};

// MaxText's learning/total_weights: the number of scored targets.
int64_t total_weights(const Batch& batch);

// This context rank's [rows, S/cp] slice of full [rows, S] rows, all five arrays together
// (parallel/load_balance.h decides the columns). maxctx::Error when S does not split.
Batch shard_batch_for_context(const Batch& full, int64_t cp, int64_t rank, bool load_balance);

}  // namespace maxctx

#include "maxctx/train/batch.h"

#include <algorithm>
#include <span>

#include "maxctx/core/check.h"
#include "maxctx/parallel/load_balance.h"

namespace maxctx {

Batch::Batch(int64_t num_rows, int64_t columns)
    : rows(num_rows),
      seq_len(columns),
      tokens(static_cast<size_t>(num_rows * columns)),
      targets(tokens.size()),
      positions(tokens.size()),
      segment_ids(tokens.size()),
      target_segment_ids(tokens.size()) {
  MAXCTX_CHECK(num_rows >= 0 && columns >= 0, "batch shape [{}, {}] is negative", num_rows,
               columns);
}

int64_t total_weights(const Batch& batch) {
  return std::count_if(batch.target_segment_ids.begin(), batch.target_segment_ids.end(),
                       [](int32_t segment) { return segment != 0; });
}

Batch shard_batch_for_context(const Batch& full, int64_t cp, int64_t rank, bool load_balance) {
  check_context_split(full.seq_len, cp, load_balance);
  Batch shard(full.rows, context_shard_len(full.seq_len, cp));
  const auto slice = [&](const std::vector<int32_t>& from, std::vector<int32_t>& to) {
    shard_rows_for_context<int32_t>(from, full.rows, full.seq_len, cp, rank, load_balance, to);
  };
  slice(full.tokens, shard.tokens);
  slice(full.targets, shard.targets);
  slice(full.positions, shard.positions);
  slice(full.segment_ids, shard.segment_ids);
  slice(full.target_segment_ids, shard.target_segment_ids);
  return shard;
}

}  // namespace maxctx

#include "maxctx/model/moe_dropping.h"

#include <algorithm>
#include <vector>

#include "maxctx/core/check.h"

namespace maxctx::model {

int64_t dense_slots(int64_t seq, int64_t context, int64_t X, int64_t K, double capacity_factor) {
  const int64_t capacity = expert_capacity(seq * context, X, K, capacity_factor);
  return context > 1 ? std::min(capacity, seq) : capacity;
}

void chunk_choice_counts(const MoeRouting& routing, int64_t batch, int64_t seq, int64_t held,
                         int64_t X, int64_t K, std::span<int64_t> counts) {
  MAXCTX_CHECK(held > 0 && seq % held == 0, "{} tokens in {} equal chunks", seq, held);
  MAXCTX_CHECK_EQ(static_cast<int64_t>(counts.size()), batch * held * X, "chunk counts");
  std::fill(counts.begin(), counts.end(), 0);
  const int64_t chunk = seq / held;
  for (int64_t b = 0; b < batch; ++b) {
    for (int64_t s = 0; s < seq; ++s) {
      int64_t* count = counts.data() + (b * held + s / chunk) * X;
      const int64_t t = b * seq + s;
      for (int64_t j = 0; j < K; ++j) ++count[routing.top_index[t * K + j]];
    }
  }
}

void chunk_offsets(std::span<const int64_t> all, int64_t batch, int64_t chunks,
                   std::span<const int64_t> local_chunks, int64_t X, std::span<int64_t> offsets) {
  const int64_t held = static_cast<int64_t>(local_chunks.size());
  MAXCTX_CHECK_EQ(static_cast<int64_t>(all.size()), batch * chunks * X, "every chunk's counts");
  MAXCTX_CHECK_EQ(static_cast<int64_t>(offsets.size()), batch * held * X, "chunk offsets");
  for (int64_t b = 0; b < batch; ++b) {
    for (int64_t i = 0; i < held; ++i) {
      const int64_t chunk = local_chunks[static_cast<size_t>(i)];
      MAXCTX_CHECK(chunk >= 0 && chunk < chunks, "chunk {} of {}", chunk, chunks);
      int64_t* offset = offsets.data() + (b * held + i) * X;
      std::fill(offset, offset + X, 0);
      for (int64_t before = 0; before < chunk; ++before) {
        const int64_t* count = all.data() + (b * chunks + before) * X;
        for (int64_t x = 0; x < X; ++x) offset[x] += count[x];
      }
    }
  }
}

void dense_dispatch_chunks(const MoeRouting& routing, int64_t batch, int64_t seq, int64_t X,
                           int64_t K, int64_t capacity, int64_t slots, int64_t held,
                           std::span<const int64_t> offsets, MoeDispatch& d) {
  MAXCTX_CHECK_GT(capacity, 0, "an expert capacity");
  MAXCTX_CHECK_GT(slots, 0, "expert slots");
  MAXCTX_CHECK(held > 0 && seq % held == 0, "{} tokens in {} equal chunks", seq, held);
  MAXCTX_CHECK_EQ(static_cast<int64_t>(offsets.size()), batch * held * X, "chunk offsets");
  const int64_t N = batch * seq;
  const int64_t chunk = seq / held;
  d.expert_begin.resize(static_cast<size_t>(X + 1));
  for (int64_t x = 0; x <= X; ++x) d.expert_begin[x] = x * batch * slots;
  d.row_token.assign(static_cast<size_t>(X * batch * slots), -1);
  d.choice_row.assign(static_cast<size_t>(N * K), -1);
  std::vector<int64_t> count(static_cast<size_t>(X));  // the row's pairs per expert so far
  std::vector<int64_t> kept(static_cast<size_t>(X));   // of them kept on this rank
  for (int64_t b = 0; b < batch; ++b) {
    std::fill(kept.begin(), kept.end(), 0);
    for (int64_t s = 0; s < seq; ++s) {
      if (s % chunk == 0) {
        const int64_t* offset = offsets.data() + (b * held + s / chunk) * X;
        std::copy(offset, offset + X, count.begin());
      }
      const int64_t t = b * seq + s;
      // MaxText's cumsum over the row's (token, choice) pairs in order: the c-th pair sent to
      // an expert is kept when c <= capacity, and dropped otherwise.
      for (int64_t j = 0; j < K; ++j) {
        const int64_t x = routing.top_index[t * K + j];
        if (count[x]++ >= capacity) continue;
        const int64_t slot = kept[x]++;
        MAXCTX_CHECK_LT(slot, slots, "expert slots of a row");
        const int64_t row = (x * batch + b) * slots + slot;
        d.row_token[row] = t;
        d.choice_row[t * K + j] = row;
      }
    }
  }
}

void context_dense_dispatch(const MoeRouting& routing, int64_t batch, int64_t seq, int64_t X,
                            int64_t K, double capacity_factor, parallel::SequenceChunks& chunks,
                            MoeDispatch& d) {
  const std::span<const int64_t> local = chunks.local_chunks();
  const int64_t held = static_cast<int64_t>(local.size());
  std::vector<int64_t> mine(static_cast<size_t>(batch * held * X));
  std::vector<int64_t> all(static_cast<size_t>(batch * chunks.chunks() * X));
  std::vector<int64_t> offsets(mine.size());
  chunk_choice_counts(routing, batch, seq, held, X, K, mine);
  chunks.gather_chunk_counts(mine, batch, X, all);
  chunk_offsets(all, batch, chunks.chunks(), local, X, offsets);
  const int64_t context = chunks.ranks();
  dense_dispatch_chunks(routing, batch, seq, X, K,
                        expert_capacity(seq * context, X, K, capacity_factor),
                        dense_slots(seq, context, X, K, capacity_factor), held, offsets, d);
}

int64_t dropped_choices(const MoeDispatch& d) {
  return static_cast<int64_t>(std::count(d.choice_row.begin(), d.choice_row.end(), -1));
}

}  // namespace maxctx::model

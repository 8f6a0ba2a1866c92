#include "maxctx/parallel/sequence_chunks.h"

#include <algorithm>

#include "maxctx/core/check.h"

namespace maxctx::parallel {

int64_t context_chunk_count(int64_t cp, bool load_balance) {
  return load_balance && cp > 1 ? 2 * cp : cp;
}

std::vector<int64_t> context_chunks_of(int64_t cp, int64_t rank, bool load_balance) {
  MAXCTX_CHECK(cp >= 1 && rank >= 0 && rank < cp, "context rank {} of {}", rank, cp);
  if (!load_balance || cp == 1) return {rank};
  return {rank, 2 * cp - 1 - rank};
}

ContextSequenceChunks::ContextSequenceChunks(const Communicator& context, bool load_balance)
    : context_(context),
      load_balance_(load_balance),
      chunks_(context_chunk_count(context.size(), load_balance)),
      local_(context_chunks_of(context.size(), context.rank(), load_balance)) {}

void ContextSequenceChunks::gather_chunk_counts(std::span<const int64_t> mine, int64_t batch,
                                                int64_t n, std::span<int64_t> all) {
  const int64_t held = static_cast<int64_t>(local_.size());
  MAXCTX_CHECK_EQ(static_cast<int64_t>(mine.size()), batch * held * n,
                  "counts of this rank's chunks");
  MAXCTX_CHECK_EQ(static_cast<int64_t>(all.size()), batch * chunks_ * n, "counts of every chunk");
  const int cp = context_.size();
  gathered_.resize(static_cast<size_t>(cp) * mine.size());
  context_.all_gather<int64_t>(mine, gathered_);
  // Rank p's block holds its chunks in its local order; put every chunk in its token order.
  for (int p = 0; p < cp; ++p) {
    const std::vector<int64_t> chunks = context_chunks_of(cp, p, load_balance_);
    const int64_t* block = gathered_.data() + static_cast<size_t>(p) * mine.size();
    for (int64_t b = 0; b < batch; ++b) {
      for (int64_t i = 0; i < held; ++i) {
        const int64_t* from = block + (b * held + i) * n;
        int64_t* to = all.data() + (b * chunks_ + chunks[static_cast<size_t>(i)]) * n;
        std::copy(from, from + n, to);
      }
    }
  }
}

void ContextSequenceChunks::add_traffic(Traffic& traffic, const std::string& axis, int64_t cp,
                                        int64_t batch, int64_t local_chunks, int64_t n) {
  traffic.add(axis, CollectiveKind::kAllGather,
              cp * batch * local_chunks * n * static_cast<int64_t>(sizeof(int64_t)));
}

}  // namespace maxctx::parallel

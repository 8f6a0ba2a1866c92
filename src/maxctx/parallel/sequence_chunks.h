// The context axis' chunks of each sequence (model_plan.h SequenceChunks) over the mesh's
// `context` communicator: which chunks this rank holds (the dual chunk swap of
// parallel/load_balance.h) and the all-gather of per-chunk counts that dense MoE dispatch with
// capacity dropping needs to count an expert's choices in the sequence's token order.
#pragma once

#include <string>
#include <vector>

#include "maxctx/mesh/communicator.h"
#include "maxctx/mesh/traffic.h"
#include "maxctx/parallel/model_plan.h"

namespace maxctx::parallel {

// The chunks rank `rank` of `cp` holds, in its local order: {rank, 2·cp−1−rank} of 2·cp with
// load balancing, {rank} of cp without (cp = 1: {0} of 1 either way).
std::vector<int64_t> context_chunks_of(int64_t cp, int64_t rank, bool load_balance);
int64_t context_chunk_count(int64_t cp, bool load_balance);

class ContextSequenceChunks final : public SequenceChunks {
 public:
  ContextSequenceChunks(const Communicator& context, bool load_balance);
  int ranks() const override { return context_.size(); }
  int64_t chunks() const override { return chunks_; }
  std::span<const int64_t> local_chunks() const override { return local_; }
  void gather_chunk_counts(std::span<const int64_t> mine, int64_t batch, int64_t n,
                           std::span<int64_t> all) override;

  // What one gather_chunk_counts sends on `axis` (cp ranks, each holding local_chunks chunks of
  // `batch` sequences, n counts each): for `maxctx plan`.
  static void add_traffic(Traffic& traffic, const std::string& axis, int64_t cp, int64_t batch,
                          int64_t local_chunks, int64_t n);

 private:
  const Communicator& context_;
  bool load_balance_;
  int64_t chunks_;
  std::vector<int64_t> local_;
  std::vector<int64_t> gathered_;  // (cp, batch, local chunks, n) as the ranks sent them
};

}  // namespace maxctx::parallel

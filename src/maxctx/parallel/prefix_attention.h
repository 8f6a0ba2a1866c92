// A chunked prefill's attention to the earlier chunks of the same prompt (MaxText's chunked
// prefill: a chunk's queries see the KV cache rows the chunks before it wrote, and the chunk
// itself, causally), over the sequence-sharded cache of `context_autoregressive`.
//
// Rank c holds its columns of every earlier chunk, so every rank's queries need every shard.
// Each rank all-gathers the chunk's queries of all ranks (ca·S rows), attends each rank's
// queries to its own shard, and one all_to_all returns to every rank the partial (out, lse) of
// its queries from every shard; those are merged (attention_merge, rank order) into the
// caller's accumulator, which holds the chunk's attention to itself. The shard is read in place
// (an f32 or bf16 cache) or dequantized block by block (int8, at most S rows at a time), so
// every buffer here depends on the chunk's rows, not on the prompt's. One rank (ca = 1) skips
// the gather and the exchange.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "maxctx/kernels/host_transfer.h"
#include "maxctx/mesh/communicator.h"
#include "maxctx/mesh/traffic.h"
#include "maxctx/parallel/kv_cache.h"
#include "maxctx/parallel/model_plan.h"

namespace maxctx::parallel {

class PrefixAttention {
 public:
  PrefixAttention(const kernels::Kernels& kernels, const Communicator& ca, const KvCache& cache)
      : kernels_(kernels), ca_(ca), cache_(cache) {}

  // Merges into merged (S, Hq, D) f32 and lse (Hq, S) f32 the attention of this rank's queries
  // q (1, S, Hq, D) at tokens' positions to rows [0, prefix_rows) of `slot` of `layer`, on every
  // rank's shard (every rank calls this with the same S and prefix_rows).
  void merge_into(TensorView merged, TensorView lse, int64_t layer, int64_t slot,
                  int64_t prefix_rows, TensorView q, const TokenLayout& tokens,
                  const kernels::AttentionParams& dims);

  // One call's collectives on `axis` (ca ranks; none on one), for `maxctx plan`.
  static void add_traffic(Traffic& traffic, const std::string& axis, int64_t ca, int64_t rows,
                          int64_t heads_q, int64_t head_dim, DType dtype);
  // What a call with S = `rows` leaves held (the buffers are kept for the next call).
  static int64_t staging_bytes(int64_t ca, int64_t rows, int64_t heads_q, int64_t heads_kv,
                               int64_t head_dim, DType dtype, bool int8_cache);
  int64_t held_bytes() const;

 private:
  // This rank's partials of the gathered queries against rows [0, prefix_rows) of its shard:
  // block c of send_ for rank c's queries.
  void attend_shard(int64_t layer, int64_t slot, int64_t prefix_rows, TensorView queries,
                    const int32_t* q_ids, const kernels::AttentionParams& p);

  const kernels::Kernels& kernels_;
  const Communicator& ca_;
  const KvCache& cache_;
  Tensor queries_;                      // (ca, S, Hq, D) every rank's queries, q's dtype
  std::vector<int32_t> ids_, all_ids_;  // positions | segments: this rank's, every rank's
  kernels::DeviceIndices ids_device_;   // all_ids_ in the backend's memory
  Tensor send_, recv_;                  // ca × [out (S, Hq, D) | lse (Hq, S)] f32
  Tensor partial_;                      // one block's [out | lse] before its merge
  Tensor block_k_, block_v_;            // an int8 block dequantized (S, Hkv, D), q's dtype
};

}  // namespace maxctx::parallel

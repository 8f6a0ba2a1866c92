// Attention over the `context_autoregressive` axis (size ca) for the two inference phases
// (DESIGN.md §6), as LayerAttention implementations: decode-time context parallelism, beside
// training's (context_attention.h) whose all-gather prefill reuses.
//
//  - PrefillAttention: this rank holds a contiguous 1/ca of every prompt; queries attend through
//    parallel::AllGatherContextAttention (K/V of the KV heads all-gathered, exactly the training
//    path), then the K/V go to the cache: with decode sharding `sequence` each rank keeps its own
//    rows; with `batch` the rows are all-gathered once more and each rank keeps the whole prompt
//    of the slots it decodes (MaxText's insert, which reshards sequence to batch).
//  - DecodeAttention, `sequence`: every rank has the new token of every slot; its K/V are
//    stored by one owner (position % ca, round-robin, so shards stay within one row of each
//    other); each rank attends the query to its shard, giving (o_r, lse_r), lse_r = −inf where
//    the shard has nothing visible; one all-gather of the partials, merged in rank order with
//    attention_merge (lse = log Σ exp lse_r, o = Σ exp(lse_r − lse)·o_r), so every rank holds
//    the same bits. `batch`: this rank holds its slots' whole caches; no collective.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "maxctx/config/config.h"
#include "maxctx/mesh/communicator.h"
#include "maxctx/parallel/context_attention.h"
#include "maxctx/parallel/kv_cache.h"
#include "maxctx/parallel/model_plan.h"
#include "maxctx/parallel/prefix_attention.h"

namespace maxctx::parallel {

// context_autoregressive_decode's choice (config.h).
using maxctx::DecodeSharding;

// The rank of `context_autoregressive` that stores the decode token at `position`.
inline int decode_owner(int32_t position, int ca) { return static_cast<int>(position % ca); }

// tokens: (B = every slot, S = this rank's share of the padded prompt), or with a pass set (a
// chunked prefill, sequence sharding or one rank only) slots [first, first + B) at cache rows
// [first_row, first_row + S). Layer 0 also records the rows' positions and segment ids in the
// cache. A pass from a later row (one slot: a prompt prefilled in chunks of tokens) attends to
// the chunk and to the rows before first_row on every rank (PrefixAttention), merged in f32.
class PrefillAttention final : public LayerAttention {
 public:
  PrefillAttention(const kernels::Kernels& kernels, const Communicator& ca, DecodeSharding sharding,
                   KvCache& cache);
  // The cache slot of the batch's first sequence and the cache row of its first token on this
  // rank ((0, 0): the batch is every slot's whole prompt).
  void set_pass(int64_t first_slot, int64_t first_row) {
    first_slot_ = first_slot;
    first_row_ = first_row;
  }
  // The staging buffers this holds after its calls: the all-gather's and the prefix's.
  int64_t held_bytes() const;
  // held_bytes after passes of at most x's rows, of which those after a prompt's first chunk
  // (one slot) have at most prefix_rows rows (0: none; batch_sharded: the insert's all-gather
  // too), for `maxctx plan`.
  static int64_t staging_bytes(int64_t ca, const AttentionOperands& x, int64_t prefix_rows,
                               bool int8_cache, bool batch_sharded);
  void forward(int64_t layer, TensorView out, TensorView lse, TensorView q, TensorView k,
               TensorView v, const TokenLayout& tokens,
               const kernels::AttentionParams& dims) override;

 private:
  void store_batch_sharded(int64_t layer, TensorView k, TensorView v, const TokenLayout& tokens,
                           int64_t row_elements);

  const kernels::Kernels& kernels_;
  const Communicator& ca_;
  DecodeSharding sharding_;
  KvCache& cache_;
  int64_t first_slot_ = 0;
  int64_t first_row_ = 0;
  AllGatherContextAttention attention_;
  PrefixAttention prefix_;
  Tensor lse_;                                // (B, Hq, S)
  Tensor merged_;                             // (S, Hq, D) f32: a later chunk's accumulator
  Tensor send_, recv_;                        // batch sharding: K | V of every rank
  std::vector<int32_t> send_ids_, recv_ids_;  // batch sharding: positions | segments
};

// tokens: (B = the cache's slots, S = 1), each slot's new token at its position.
class DecodeAttention final : public LayerAttention {
 public:
  DecodeAttention(const kernels::Kernels& kernels, const Communicator& ca, DecodeSharding sharding,
                  KvCache& cache);
  // Before a step's forward: slot b's new token sits at positions[b]; inactive slots (finished)
  // are computed but their K/V are not kept.
  void begin_step(std::span<const int32_t> positions, std::span<const uint8_t> active);
  void forward(int64_t layer, TensorView out, TensorView lse, TensorView q, TensorView k,
               TensorView v, const TokenLayout& tokens,
               const kernels::AttentionParams& dims) override;

 private:
  const kernels::Kernels& kernels_;
  const Communicator& ca_;
  DecodeSharding sharding_;
  KvCache& cache_;
  std::vector<int64_t> rows_;     // (slots) where this rank stores the new K/V, −1: not here
  kernels::DeviceIndices q_seg_;  // (slots) all 1: a decode query is a token
  Tensor partial_;                // (B, Hq, D) then (B, Hq): this rank's out and lse
  Tensor gathered_;               // ca × partial_
  Tensor lse_;                    // (B, Hq)
  Tensor merged_;                 // (B, Hq, D) f32: the merge's accumulator
};

}  // namespace maxctx::parallel

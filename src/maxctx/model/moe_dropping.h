// Dense MoE dispatch with capacity dropping (sparse_matmul=false, capacity_factor > 0) when a
// sequence's tokens lie on several ranks (context parallelism).
//
// The rule is the one-rank rule (moe_block.h dense_dispatch, MaxText's generate_masks): the
// (token, choice) pairs of one row of the batch are counted per expert in token order, and the
// c-th pair sent to an expert is kept when c <= capacity, capacity from the whole sequence's
// length S. A row counts as one sequence whatever its segment ids say (packing): MaxText's
// cumsum runs over the row, and so does the one-rank path. Under context the row is cut into
// chunks (parallel/model_plan.h SequenceChunks); a rank counts its chunks' choices per expert,
// the counts of every chunk are all-gathered over the axis, and each local chunk starts from
// the exclusive prefix over the chunks before it in the ORIGINAL token order (chunk 0, 1, ...,
// whatever the dual chunk swap put where). So exactly the pairs the one-rank run drops are
// dropped, on every mesh. (MaxText instead reorders the batch before the model under context
// load balancing, so its cumsum runs in the permuted order 0, 2·cp−1, 1, 2·cp−2, ... and drops
// other tokens than its own cp = 1 run; see docs/moe.md.)
//
// A rank's kept pairs per (row, expert) are at most min(capacity, its tokens of the row): that
// many slots per (row, expert) here, rows laid out as one rank's dense plan,
// (x·batch + b)·slots + slot, the slot being the pair's order among this rank's kept pairs.
#pragma once

#include <cstdint>
#include <span>

#include "maxctx/model/moe_block.h"
#include "maxctx/parallel/model_plan.h"

namespace maxctx::model {

// Slots per (row, expert) of dense dispatch on a rank holding `seq` tokens of each row of
// seq·context tokens: the capacity of the whole row, at most `seq` when context > 1 (a rank
// cannot keep more pairs of one expert than it has tokens; top-k picks an expert once).
int64_t dense_slots(int64_t seq, int64_t context, int64_t X, int64_t K, double capacity_factor);

// counts (batch, held, X): the choices of each expert among the tokens of each of the `held`
// equal chunks of each row (rows of `seq` tokens, row-major).
void chunk_choice_counts(const MoeRouting& routing, int64_t batch, int64_t seq, int64_t held,
                         int64_t X, int64_t K, std::span<int64_t> counts);

// offsets (batch, held, X): per row and expert, the choices of the chunks before each local
// chunk in token order, from every chunk's counts all (batch, chunks, X) in token order;
// local_chunks names the local chunks (held of them).
void chunk_offsets(std::span<const int64_t> all, int64_t batch, int64_t chunks,
                   std::span<const int64_t> local_chunks, int64_t X, std::span<int64_t> offsets);

// The dense plan of `batch` rows of `seq` tokens cut into `held` equal chunks, chunk i's count
// of expert x in row b starting at offsets[(b·held + i)·X + x]: R = X·batch·slots rows. With
// held = 1, zero offsets and slots = capacity, the one-rank plan.
void dense_dispatch_chunks(const MoeRouting& routing, int64_t batch, int64_t seq, int64_t X,
                           int64_t K, int64_t capacity, int64_t slots, int64_t held,
                           std::span<const int64_t> offsets, MoeDispatch& dispatch);

// The whole step under context: counts, their all-gather over `chunks` (one per call),
// prefixes and the plan, with the capacity of the whole row (seq · chunks.ranks() tokens).
void context_dense_dispatch(const MoeRouting& routing, int64_t batch, int64_t seq, int64_t X,
                            int64_t K, double capacity_factor, parallel::SequenceChunks& chunks,
                            MoeDispatch& dispatch);

// The (token, choice) pairs the plan dropped.
int64_t dropped_choices(const MoeDispatch& dispatch);

}  // namespace maxctx::model

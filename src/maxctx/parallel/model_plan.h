// What the model asks of parallelism: attention over this rank's tokens, the tensor-axis
// all-reduce after row-parallel projections, where the weights live between uses (fsdp), and
// inference's row split of the MLP and head, and a mixture of experts' exchange of rows over the
// expert axis. Nothing else.
//
// The model (src/maxctx/model) never includes mesh/: it calls a ModelPlan that parallel/ built
// for the mesh at hand, so the model code is the same for context = 1 and context = 8, tensor = 1
// and tensor = 4. Implementations: LocalAttention (one rank holds the whole sequence), the
// context-parallel all_gather and ring plans, the tensor-parallel reducer, ShardedParameters
// and the row split over context_autoregressive; parallel/parallelize.h builds them.
#pragma once

#include <cstdint>
#include <span>

#include "maxctx/kernels/kernels.h"

namespace maxctx::parallel {

// This rank's tokens: (batch, seq) row-major, seq = the local sequence length. Positions and
// segment ids are the tokens' own (after the dual chunk swap, not their row index).
struct TokenLayout {
  int64_t batch = 0;
  int64_t seq = 0;
  const int32_t* positions = nullptr;    // (batch, seq) in the backend's memory
  const int32_t* segment_ids = nullptr;  // (batch, seq) in the backend's memory
  // The same two arrays on the host, for the ids a context plan exchanges between ranks; null:
  // the backend's memory is the host's (the pointers above serve).
  const int32_t* host_positions = nullptr;
  const int32_t* host_segment_ids = nullptr;
  const int32_t* positions_on_host() const { return host_positions ? host_positions : positions; }
  const int32_t* segment_ids_on_host() const {
    return host_segment_ids ? host_segment_ids : segment_ids;
  }
};

// What an attention plan passes its ops to count blocks in: the cpu backend counts for free,
// while a device backend would read every call's count back (kernel_ops.inc: ops never read
// back), so a plan on one asks for no count.
inline kernels::AttentionStats* counted_stats(const kernels::Kernels& kernels,
                                              kernels::AttentionStats& stats) {
  return kernels.device() == Device::kCpu ? &stats : nullptr;
}

// Causal (segment- and window-masked) self-attention of this rank's queries against every key
// of their sequence, wherever those keys live. Shapes use this rank's heads (Hq, Hkv after the
// tensor split) and this rank's tokens:
//   q, out (B, S, Hq, D)   k, v (B, S, Hkv, D)   lse (B, Hq, S)
// `dims` carries heads, head_dim and the window; its batch/seq fields are ignored. Dtypes are
// the op table's (kernels.h): q, k, v in the activation dtype, which K and V also travel in
// between ranks; lse and the gradients dq, dk, dv f32, so dK and dV are summed in fp32.
class AttentionPlan {
 public:
  virtual ~AttentionPlan() = default;
  virtual void forward(TensorView out, TensorView lse, TensorView q, TensorView k, TensorView v,
                       const TokenLayout& tokens, const kernels::AttentionParams& dims) = 0;
  // dq, dk, dv (this rank's rows) are overwritten.
  virtual void backward(TensorView dq, TensorView dk, TensorView dv, TensorView d_out,
                        TensorView out, TensorView lse, TensorView q, TensorView k, TensorView v,
                        const TokenLayout& tokens, const kernels::AttentionParams& dims) = 0;
  // (query tile, key tile) blocks computed and skipped so far, for load-balance reports. Counted
  // on the cpu backend only (counted_stats): zero on a device backend.
  virtual kernels::AttentionStats stats() const = 0;
  // Bytes of the staging buffers the plan holds now (gathered K/V, ring chunks), for the check
  // of `maxctx plan`'s figure; a plan without any holds 0.
  virtual int64_t held_bytes() const { return 0; }
};

// How one decoder layer's attention reaches its keys, as the model's layer calls it (training
// adapts its AttentionPlan; inference's prefill and decode plans implement it over the KV
// cache). q, out (B, S, Hq, D) and k, v (B, S, Hkv, D) are this rank's tokens after RoPE; lse
// (B, Hq, S) is written when the caller keeps it (training's backward) and may be empty
// otherwise; `dims` carries heads, head_dim and window; `layer` picks the cache layer.
class LayerAttention {
 public:
  virtual ~LayerAttention() = default;
  virtual void forward(int64_t layer, TensorView out, TensorView lse, TensorView q, TensorView k,
                       TensorView v, const TokenLayout& tokens,
                       const kernels::AttentionParams& dims) = 0;
};

// The sum over the tensor axis of a row-parallel projection's partial outputs (and of the
// input gradients of column-parallel ones), in place on an f32 view (sums are fp32 whatever
// the activation dtype). Identity when tensor = 1.
class TensorReducer {
 public:
  virtual ~TensorReducer() = default;
  virtual void all_reduce_sum(TensorView values) = 0;
};

// tensor = 1 (and inference, which replicates the tensor axis' work): nothing to reduce.
class NoTensorReduction final : public TensorReducer {
 public:
  void all_reduce_sum(TensorView) override {}
};

// Where the weights live between uses (fsdp). The model names its weight units in the order it
// uses them: 0 = the token embedding, 1..L = decoder layers, L+1 = the final norm and output
// head (model/weights.h weight_units). before_use(u) comes before a unit's weights are read and
// after_use(u) once they are no longer read, in the forward and again in the backward (the
// weights are not kept in between); before_gradients(u) before the backward first writes (or
// accumulates into) a unit's gradients, and gradients_ready(u) once it has finished with them,
// which are then taken away (the unit's gradient views read zero at the next before_gradients).
// Between after_use and before_use a unit's weights, and outside before_gradients ..
// gradients_ready its gradients, may hold no memory at all (Allocator::decommit): touching them
// there is an error. Null in the plan means the weights are simply resident and gradients stay
// where they are.
class WeightPlan {
 public:
  virtual ~WeightPlan() = default;
  virtual void before_use(int unit) = 0;
  virtual void after_use(int unit) = 0;
  virtual void before_gradients(int unit) = 0;
  virtual void gradients_ready(int unit) = 0;
};

// Which part of a row split this rank computes: `ranks` ranks hold the same tokens, and rank
// `rank` computes rows split_offset(out_dim, ranks, rank) .. + split_count(...) of a projection.
struct RowSplitPart {
  int rank = 0;
  int ranks = 1;
};

// A decode step in which every rank of an axis holds the same tokens (decode with the KV cache
// sharded along the sequence) need not read every weight on every rank: attention's projections
// stay replicated (MaxText's inference rule), but each rank computes only its part of the MLP's
// hidden units, of the MLP's output and of the logits, and `gather` assembles each from the
// parts. Every output element is one dot product over the whole input, as without the split
// (no partial sums to add, the int8 codes and scales unchanged), and each rank streams 1/ranks
// of the MLP and head weights per step.
class RowSplit {
 public:
  virtual ~RowSplit() = default;
  virtual RowSplitPart part() const = 0;
  // out (N, out_dim) from every rank's mine (N, split_count(out_dim, ranks, rank)), one dtype.
  virtual void gather(TensorView out, TensorView mine) = 0;
};

// The same rows split when the ranks hold different tokens (a prefill's columns over
// context_autoregressive, a batch-sharded decode's slots), so that a weight is stored once
// across the axis: every rank's input rows are gathered, each rank computes its output columns
// for all of them with its rows of the weight, and each rank's tokens get their columns back
// from every rank. Every output element is still one dot product over the whole input row.
class TokenRowSplit {
 public:
  virtual ~TokenRowSplit() = default;
  virtual RowSplitPart part() const = 0;
  // all (ranks·N, in) = every rank's mine (N, in), rank by rank (N the same on every rank).
  virtual void gather_inputs(TensorView all, TensorView mine) = 0;
  // out (N, out_dim) of this rank's tokens from every rank's computed (ranks·N,
  // split_count(out_dim, ranks, rank)): the columns of every rank's tokens that rank computed.
  virtual void return_outputs(TensorView out, TensorView computed) = 0;
};

// The vocabulary split over an axis (MaxText's inference rule: `vocab` over
// context_autoregressive): rank r holds rows [split_offset(V, ranks, r), + split_count(...)) of
// the embedding and of the output head, so each is stored once across the axis. Both
// combinations are exact: a token's embedding row is looked up by the rank that holds it and
// sent back (nothing is summed), and each logit is one dot product over the whole input row,
// computed by the rank that holds its head row.
class VocabSplit {
 public:
  virtual ~VocabSplit() = default;
  virtual RowSplitPart part() const = 0;
  // out (N, E) = the embedding rows of this rank's N tokens (host ids; every rank its own, N may
  // differ between ranks) from every rank's part of the table, `table_part` being this rank's.
  virtual void embed(TensorView out, std::span<const int32_t> tokens, TensorView table_part) = 0;
  // out (ranks · N, width) = every rank's `mine` (N, width), rank by rank (N the same on every
  // rank): the rows whose logits the head computes.
  virtual void gather_rows(TensorView out, TensorView mine) = 0;
  // out (N, V) from every rank's mine (N, its part of V); the N rows the same on every rank.
  virtual void gather(TensorView out, TensorView mine) = 0;
};

// The expert axis (MaxText's `expert`): its ranks hold different tokens (the axis shards the
// batch like `data`) and each holds num_experts / ranks() experts, rank r experts
// [r·n, (r+1)·n). A mixture of experts sends each expert's rows to the rank that holds it and
// the results back: the two all_to_alls below, over the axis.
class ExpertExchange {
 public:
  virtual ~ExpertExchange() = default;
  virtual int rank() const = 0;
  virtual int ranks() const = 0;
  // recv (ranks() · n) = every rank's block for this rank, in rank order, from send (ranks() · n),
  // block p going to rank p: equal blocks of counts.
  virtual void exchange_counts(std::span<const int64_t> send, std::span<int64_t> recv) = 0;
  // out = the rows every rank sent here, rank by rank, from in's rows: send_rows[p] rows (in
  // order) to rank p, recv_rows[p] rows received from rank p. in and out have one row size and
  // one dtype.
  virtual void exchange_rows(TensorView in, std::span<const int64_t> send_rows, TensorView out,
                             std::span<const int64_t> recv_rows) = 0;
};

// Under context parallelism a sequence is cut into chunks() chunks of equal length, chunk c
// being tokens [c·S/chunks(), (c+1)·S/chunks()) in the sequence's order, spread over ranks()
// ranks (parallel/load_balance.h: 2·cp chunks with load balancing, rank r holding r and
// 2·cp−1−r; cp chunks without, rank r holding r). Dense MoE dispatch with capacity dropping
// counts an expert's choices in token order over the whole sequence, so each rank needs the
// counts of the chunks before its own: one all-gather of counts over the axis.
class SequenceChunks {
 public:
  virtual ~SequenceChunks() = default;
  virtual int ranks() const = 0;
  virtual int64_t chunks() const = 0;
  // The chunks this rank holds, in its local token order.
  virtual std::span<const int64_t> local_chunks() const = 0;
  // all (batch, chunks(), n) = every chunk's n counts per sequence, chunks in token order, from
  // mine (batch, local_chunks().size(), n): this rank's chunks' in its local order. Collective.
  virtual void gather_chunk_counts(std::span<const int64_t> mine, int64_t batch, int64_t n,
                                   std::span<int64_t> all) = 0;
};

// The training model's plan: the backend its ops run on, and the parallel plans.
struct ModelPlan {
  const kernels::Kernels* kernels = nullptr;
  AttentionPlan* attention = nullptr;
  TensorReducer* tensor = nullptr;
  WeightPlan* weights = nullptr;
  int tensor_size = 1;
  int tensor_rank = 0;
  // Sums per-sequence statistics (a mixture of experts' load-balance counts) over the ranks that
  // hold parts of the same sequences (the context axis); null: each rank holds whole sequences.
  TensorReducer* sequence = nullptr;
  // The expert axis; null when it has one rank (every expert is here).
  ExpertExchange* experts = nullptr;
  // The context axis' chunks of each sequence (dense MoE dispatch with dropping); null: each
  // rank holds whole sequences.
  SequenceChunks* chunks = nullptr;
};

}  // namespace maxctx::parallel

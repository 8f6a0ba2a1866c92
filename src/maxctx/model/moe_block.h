// The Mixtral mixture-of-experts MLP (decoder_block mixtral), forward and backward.
//
//   g = x·Wgᵀ (N, X)   p = softmax(g) over all X experts   top_k(g): the K best, ties to the
//   lower expert index (jax.lax.top_k's rule)   w = softmax of the K chosen logits (= Hugging
//   Face's renormalised top-k probabilities)   out[t] = Σ_j w[t,j] · expert_j(x[t]),
//   expert(x) = w2(silu(w1·x) · w3·x)
//
// Routing and the dispatch plan are host loops over (N, K) choices; the expert MLPs run as
// matmuls through the kernel table over the rows the plan gives each expert, in the activation
// dtype, with f32 expert outputs and an f32 combine (a fixed order: choice 0, then 1, ... per
// token, so results do not depend on threads). Two plans, MaxText's two dispatch paths:
//   - sparse (sparse_matmul=true): the (token, choice) pairs sorted by expert, stable in token
//     order; expert x's rows are one contiguous block, run as one matmul (a grouped matmul).
//   - dense (sparse_matmul=false): per expert and per sequence `capacity` slots; a sequence's
//     tokens fill an expert's slots in token order and those beyond capacity are dropped
//     (MaxText's generate_masks: cumsum over the sequence's (token, choice) pairs). Empty slots
//     are zero rows that still run through the matmuls, as MaxText's dense einsums do. A dropped
//     choice contributes nothing; the other choices keep their weights (no renormalisation).
//     Under context parallelism the count runs over the whole sequence across the ranks
//     (model/moe_dropping.h).
// The load-balance loss (MaxText's load_balance_loss, when load_balance_loss_weight > 0) is
// summed per sequence here; model/llama.h turns the sums into the mean over layers and
// sequences. model/moe_reference.h is the plain per-token loop the tests hold this against.
#pragma once

#include <cstdint>
#include <vector>

#include "maxctx/core/tensor.h"
#include "maxctx/kernels/kernels.h"
#include "maxctx/model/llama_config.h"
#include "maxctx/parallel/model_plan.h"

namespace maxctx::model {

// One expert's SwiGLU projections as nn.Linear stores them. Inference with quantization=int8
// sets the int8 copies (per-output-channel scales, as a dense model's projections) and empties
// the views; the forward then reads the copies.
struct ExpertWeights {
  TensorView w_gate;  // (F, E) Hugging Face w1
  TensorView w_up;    // (F, E) w3
  TensorView w_down;  // (E, F) w2
  const kernels::Int8Weights* w_gate_i8 = nullptr;
  const kernels::Int8Weights* w_up_i8 = nullptr;
  const kernels::Int8Weights* w_down_i8 = nullptr;
};

struct MoeLayerWeights {
  TensorView router;  // (X, E) block_sparse_moe.gate
  std::vector<ExpertWeights> experts;
};

// The experts each token chose, best first.
struct MoeRouting {
  std::vector<int32_t> top_index;  // (N, K)
  std::vector<float> top_weight;   // (N, K) softmax over the K chosen logits
};

// Rows [begin, end) of the buffers an expert's matmuls run on.
struct ExpertSegment {
  int64_t expert;
  int64_t begin, end;
};

// Where each (token, choice) runs: rows of the expert buffers.
struct MoeDispatch {
  std::vector<int64_t> expert_begin;  // (X + 1): expert x owns rows [begin[x], begin[x + 1])
  std::vector<int64_t> row_token;     // (R) the token of each row; -1: an empty capacity slot
  std::vector<int64_t> choice_row;    // (N, K) the row of each choice; -1: dropped
  int64_t rows() const { return expert_begin.empty() ? 0 : expert_begin.back(); }
};

// p (N, X) and the routing of router logits (N, X) f32, K choices per token.
void route_tokens(const float* logits, int64_t N, int64_t X, int64_t K, float* probs,
                  MoeRouting& routing);
// MaxText's expert capacity per sequence for dense dispatch:
// int(max(ceil(S·K / X) · capacity_factor, capacity_factor)); capacity_factor <= 0: S (every
// token fits, nothing drops). maxctx::Error when it is 0 (a factor below 1 on short sequences:
// every choice would drop), naming the factor that gives 1.
int64_t expert_capacity(int64_t seq, int64_t X, int64_t K, double capacity_factor);
// The sparse plan: R = N·K rows, nothing dropped.
void sparse_dispatch(const MoeRouting& routing, int64_t N, int64_t X, int64_t K,
                     MoeDispatch& dispatch);
// The dense plan for `batch` sequences of `seq` tokens (row-major): R = X·batch·capacity rows,
// expert x's slot c of sequence b at row (x·batch + b)·capacity + c.
void dense_dispatch(const MoeRouting& routing, int64_t batch, int64_t seq, int64_t X, int64_t K,
                    int64_t capacity, MoeDispatch& dispatch);
// MaxText's load-balance statistics of this rank's tokens, per sequence b (row-major (batch,
// seq)): stats (batch, 2, X) f32 = [choices of the sequence's tokens per expert, Σ_s p[b,s,x]].
// Summed over the ranks that share the sequences (context), they are the whole sequences'.
void sequence_statistics(const MoeRouting& routing, const float* probs, int64_t batch, int64_t seq,
                         int64_t X, int64_t K, float* stats);
// Σ_b share_b · X · weight · Σ_x density[b,x] · mean_s p[b,s,x] from whole-sequence statistics:
// density = the sequence's choices of x over its S tokens (MaxText's mean over the sequence of
// the top-k one-hots summed over k), S = Σ_x choices / K; every
// position counts (MaxText does not mask padding). share_b = local_seq / S: the rank's part of
// a sequence it shares, so that the ranks' sum counts each sequence once.
double load_balance_sum(const float* stats, int64_t batch, int64_t local_seq, int64_t X, int64_t K,
                        double weight);

// One layer's forward state (training keeps one per layer for the backward; inference reuses
// one). The expert buffers grow to their largest use through the backend (kernels.reserve).
struct MoeBuffers {
  Tensor router_logits;  // (N, X) f32
  Tensor router_probs;   // (N, X) f32 softmax over all experts
  MoeRouting routing;
  MoeDispatch dispatch;
  Tensor expert_in;             // (R, E) activation dtype: the rows each expert runs on
  Tensor gate;                  // (R, F) activation dtype
  Tensor up;                    // (R, F)
  Tensor hidden;                // (R, F) silu(gate)·up
  Tensor expert_out;            // (R, E) f32
  kernels::Int8Rows int8_rows;  // an expert's input rows quantized (int8 experts only)
  Tensor statistics;            // (B, 2, X) f32 whole-sequence load-balance statistics
  double load_balance = 0.0;    // load_balance_sum of the last forward (0 when the weight is 0)
  int64_t dropped = 0;          // (token, choice) pairs the last forward's dispatch dropped
  // What this rank's experts run on: rows of expert_in, gate, up, hidden. Without the expert
  // axis these are the dispatch's rows, one segment per expert. Under it (ExpertExchange) the
  // dispatch's rows travel to their experts' ranks: expert_in holds the `local_rows` rows
  // received, source rank by source rank and within a source expert by expert (a segment per
  // (source, expert)); expert_out holds, in dispatch order, the outputs that came back.
  std::vector<ExpertSegment> segments;
  int64_t local_rows = 0;
  std::vector<int64_t> send_rows, recv_rows;  // (ranks) rows sent to / received from each rank
  Tensor send_in;                             // (R, E) activation dtype: rows before they travel
  Tensor local_out;  // (local_rows, E) f32: this rank's experts' outputs before they travel back
};

// The backward's workspace, shared by the layers.
struct MoeGradBuffers {
  Tensor d_rows;           // (R, E) f32 gradient of expert_out
  Tensor d_hidden;         // (R, F) f32
  Tensor d_gate;           // (R, F) f32
  Tensor d_up;             // (R, F) f32
  Tensor d_in;             // (R, E) f32 gradient of expert_in
  Tensor d_logits;         // (N, X) f32
  Tensor d_choice_weight;  // (N, K) f32 gradient of each choice's weight
  Tensor d_local;          // (local_rows, E) f32 under the expert axis: d_rows received
  Tensor d_in_local;       // (local_rows, E) f32: d_in before it travels back
};

// Buffers for `batch` sequences of `seq` tokens (allocated up front so training allocates
// nothing per step); `context`: the ranks over which each sequence is split (its tokens here
// are `seq` of seq·context), which sets dense dispatch's slots when tokens drop.
MoeBuffers allocate_moe_buffers(const kernels::Kernels& kernels, const LlamaConfig& config,
                                int64_t batch, int64_t seq, int64_t context = 1);
MoeGradBuffers allocate_moe_grad_buffers(const kernels::Kernels& kernels, const LlamaConfig& config,
                                         int64_t batch, int64_t seq, int64_t context = 1);

// The rows a dispatch of `batch` sequences of `seq` tokens makes (R of the legend above): every
// (token, choice) with sparse dispatch; every expert's capacity slots per sequence with dense.
int64_t moe_dispatch_rows(const LlamaConfig& config, int64_t batch, int64_t seq,
                          int64_t context = 1);

// The rows this rank's experts run on under an expert axis of `expert_ranks` ranks when the
// router sends every rank's rows to them: with sparse dispatch each of a token's choices of this
// rank's experts, from every rank (each choice names a different expert); dense dispatch's rows
// are capacity slots, the same number per expert whatever the routing, so always R.
int64_t moe_most_received_rows(const LlamaConfig& config, int64_t batch, int64_t seq,
                               int64_t context, int64_t expert_ranks);

// What allocate_moe_buffers (with the load-balance statistics a forward adds) and
// allocate_moe_grad_buffers hold for `batch` sequences of `seq` tokens once a step has run;
// the routing's index vectors are not counted. Under an expert axis of `expert_ranks` ranks a
// forward sends its R rows and receives `received_rows` (rows its experts run on; the buffers
// grow to the larger of the two, and the exchange's own buffers are added): the router decides
// how many, -1 counts their mean over the ranks, R (every rank sends R rows and the ranks
// together receive them all).
struct MoeBufferBytes {
  int64_t per_layer = 0;  // MoeBuffers, one per layer in training
  int64_t backward = 0;   // MoeGradBuffers, shared by the layers
};
MoeBufferBytes moe_buffer_bytes(const LlamaConfig& config, int64_t batch, int64_t seq,
                                int64_t context = 1, int64_t expert_ranks = 1,
                                int64_t received_rows = -1);

// out (N, E) f32 = the mixture applied to x (N, E), N = batch·seq; under tensor parallelism
// this rank's partial sum (the caller sums it over tensor, as after a row-parallel projection).
// `sequence` (may be null) sums the load-balance statistics over the ranks holding the other
// parts of these sequences. `experts` (may be null) is the expert axis: weights holds only this
// rank's experts (the others' views are empty), the rows of the other ranks' experts go there
// and their outputs come back; routing, dropping and the load-balance statistics are this
// rank's tokens' own, as without the axis (its ranks hold different sequences). `chunks` (may
// be null) is the context axis' split of the sequences: dense dispatch with dropping counts
// an expert's choices over the whole sequence in token order (moe_dropping.h), one small
// all-gather per call; the backward reuses this forward's plan.
void moe_forward(const kernels::Kernels& kernels, const LlamaConfig& config,
                 const MoeLayerWeights& weights, int64_t batch, int64_t seq, TensorView x,
                 TensorView out, MoeBuffers& buffers, parallel::TensorReducer* sequence = nullptr,
                 parallel::ExpertExchange* experts = nullptr,
                 parallel::SequenceChunks* chunks = nullptr);

// d_x (N, E) f32 (overwritten) and the weights' gradients (accumulated into grads) from d_out
// (N, E) f32, after moe_forward on the same x. d_load_balance is the loss's derivative with
// respect to this layer's load_balance_sum (0 when the weight is 0). Under tensor parallelism
// (each rank holding mlp_dim / tensor hidden units of every expert, the router whole) `tensor`
// sums the partial sums over the axis; d_x comes out whole. Under the expert axis (`experts`,
// as in the forward) the rows' gradients travel to the experts' ranks and the input gradients
// back; each rank accumulates the weight gradients of its own experts, from every rank's tokens.
void moe_backward(const kernels::Kernels& kernels, const LlamaConfig& config,
                  const MoeLayerWeights& weights, const MoeLayerWeights& grads, int64_t batch,
                  int64_t seq, TensorView x, TensorView d_out, TensorView d_x, MoeBuffers& buffers,
                  MoeGradBuffers& grad_buffers, float d_load_balance,
                  parallel::TensorReducer* tensor = nullptr,
                  parallel::ExpertExchange* experts = nullptr);

}  // namespace maxctx::model

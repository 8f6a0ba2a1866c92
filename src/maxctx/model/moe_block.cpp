#include "maxctx/model/moe_block.h"

#include <algorithm>
#include <cmath>

#include "maxctx/core/check.h"
#include "maxctx/model/moe_dropping.h"
#include "maxctx/parallel/weight_sharding.h"

namespace maxctx::model {

// `context`: the ranks each row of `seq` tokens here is one part of (moe_dropping.h).
int64_t moe_dispatch_rows(const LlamaConfig& c, int64_t batch, int64_t seq, int64_t context) {
  if (c.sparse_matmul) return batch * seq * c.num_experts_per_tok;
  return c.num_experts * batch *
         dense_slots(seq, context, c.num_experts, c.num_experts_per_tok, c.capacity_factor);
}

namespace {

// Rows [0, R) of a buffer that grew to at least R·cols elements, as (R, cols).
TensorView leading_rows(const Tensor& buffer, int64_t R, int64_t cols) {
  return buffer.view().elements(0, R * cols).reshaped({R, cols});
}

// One buffer of MoeBuffers or MoeGradBuffers at N tokens and R rows: the one list that the
// reservations and the byte counts below read.
template <typename Buffers>
struct BufferField {
  Tensor Buffers::*member;
  int64_t numel;
  DType dtype;
};

std::vector<BufferField<MoeBuffers>> forward_fields(const LlamaConfig& c, int64_t N, int64_t R) {
  const DType dt = c.dtype;
  const DType f32 = DType::kF32;
  using B = MoeBuffers;
  return {{&B::router_logits, N * c.num_experts, f32},
          {&B::router_probs, N * c.num_experts, f32},
          {&B::expert_in, R * c.emb_dim, dt},
          {&B::gate, R * c.mlp_dim, dt},
          {&B::up, R * c.mlp_dim, dt},
          {&B::hidden, R * c.mlp_dim, dt},
          {&B::expert_out, R * c.emb_dim, f32}};
}

std::vector<BufferField<MoeGradBuffers>> backward_fields(const LlamaConfig& c, int64_t N,
                                                         int64_t R) {
  const DType f32 = DType::kF32;
  using G = MoeGradBuffers;
  return {{&G::d_rows, R * c.emb_dim, f32},
          {&G::d_hidden, R * c.mlp_dim, f32},
          {&G::d_gate, R * c.mlp_dim, f32},
          {&G::d_up, R * c.mlp_dim, f32},
          {&G::d_in, R * c.emb_dim, f32},
          {&G::d_logits, N * c.num_experts, f32},
          {&G::d_choice_weight, N * c.num_experts_per_tok, f32}};
}

template <typename Buffers>
int64_t bytes_of(const std::vector<BufferField<Buffers>>& fields) {
  int64_t bytes = 0;
  for (const auto& f : fields) bytes += f.numel * static_cast<int64_t>(dtype_size(f.dtype));
  return bytes;
}

// Grows the expert buffers to R rows (no-op once they are as large).
void reserve_rows(const kernels::Kernels& k, const LlamaConfig& c, int64_t N, int64_t R,
                  MoeBuffers& b) {
  for (const auto& f : forward_fields(c, N, R)) k.reserve(b.*f.member, f.numel, f.dtype);
}

void reserve_grad_rows(const kernels::Kernels& k, const LlamaConfig& c, int64_t N, int64_t R,
                       MoeGradBuffers& g) {
  for (const auto& f : backward_fields(c, N, R)) k.reserve(g.*f.member, f.numel, f.dtype);
}

// The expert buffers' first R rows: what every expert's matmuls read and write.
struct ExpertRows {
  TensorView in, gate, up, hidden;  // (R, E), (R, F) × 3
};

ExpertRows expert_rows(const MoeBuffers& b, int64_t R, int64_t E, int64_t F) {
  return {leading_rows(b.expert_in, R, E), leading_rows(b.gate, R, F), leading_rows(b.up, R, F),
          leading_rows(b.hidden, R, F)};
}

// Without the expert axis every expert runs here on its dispatch rows: one segment per expert
// that has rows.
void local_segments(const MoeDispatch& d, MoeBuffers& b) {
  b.segments.clear();
  for (size_t e = 0; e + 1 < d.expert_begin.size(); ++e) {
    if (d.expert_begin[e] < d.expert_begin[e + 1]) {
      b.segments.push_back({static_cast<int64_t>(e), d.expert_begin[e], d.expert_begin[e + 1]});
    }
  }
  b.local_rows = d.rows();
}

// Under the expert axis: expert x's dispatch rows go to the rank holding x. Rank p's experts
// are contiguous, so are their rows (both dispatch plans keep an expert's rows together, in
// expert order): the block for rank p is one run of rows. The per-expert counts travel first,
// so that each rank knows where its experts' rows land among those it receives.
void exchange_segments(const MoeDispatch& d, int64_t X, parallel::ExpertExchange& ex,
                       MoeBuffers& b) {
  const int P = ex.ranks();
  const parallel::ExpertRange mine = parallel::local_experts(X, P, ex.rank());
  const int64_t n = mine.count;
  std::vector<int64_t> send_counts(static_cast<size_t>(X)), recv_counts(static_cast<size_t>(X));
  for (int64_t x = 0; x < X; ++x) send_counts[x] = d.expert_begin[x + 1] - d.expert_begin[x];
  ex.exchange_counts(send_counts, recv_counts);
  b.send_rows.assign(static_cast<size_t>(P), 0);
  b.recv_rows.assign(static_cast<size_t>(P), 0);
  b.segments.clear();
  int64_t at = 0;
  for (int p = 0; p < P; ++p) {
    for (int64_t e = 0; e < n; ++e) {
      b.send_rows[p] += send_counts[p * n + e];
      const int64_t count = recv_counts[p * n + e];
      b.recv_rows[p] += count;
      if (count > 0) b.segments.push_back({mine.first + e, at, at + count});
      at += count;
    }
  }
  b.local_rows = at;
}

bool exchanges(const parallel::ExpertExchange* experts) {
  return experts != nullptr && experts->ranks() > 1;
}

// out[t] (N, E) = Σ_j scale[t, j] · rows[row of choice j] over the choices that ran, in choice
// order (a fixed summation order); scale null: 1. The combine and the input gradient's scatter.
void gather_choices(const MoeDispatch& d, int64_t N, int64_t K, int64_t E, const float* scale,
                    const float* rows, float* out) {
  std::fill(out, out + N * E, 0.0f);
  for (int64_t t = 0; t < N; ++t) {
    for (int64_t j = 0; j < K; ++j) {
      const int64_t row = d.choice_row[t * K + j];
      if (row < 0) continue;
      const float s = scale != nullptr ? scale[t * K + j] : 1.0f;
      for (int64_t i = 0; i < E; ++i) out[t * E + i] += s * rows[row * E + i];
    }
  }
}

// The block's dimensions for `batch` sequences of `seq` tokens (legend of moe_block.h).
struct MoeDims {
  int64_t N, E, F, X, K;
};

// F is this rank's hidden units (the experts' w1 rows: mlp_dim / tensor), read from its first
// expert (under the expert axis the others' weights are not here).
MoeDims moe_dims(const LlamaConfig& c, const MoeLayerWeights& w, int64_t batch, int64_t seq,
                 const parallel::ExpertExchange* experts) {
  const int64_t first =
      exchanges(experts)
          ? parallel::local_experts(c.num_experts, experts->ranks(), experts->rank()).first
          : 0;
  const ExpertWeights& e = w.experts[first];
  const int64_t F = e.w_gate_i8 != nullptr ? e.w_gate_i8->out_dim : e.w_gate.shape()[0];
  return {batch * seq, c.emb_dim, F, c.num_experts, c.num_experts_per_tok};
}

void check_weights(const LlamaConfig& c, const MoeLayerWeights& w) {
  MAXCTX_CHECK(static_cast<int64_t>(w.experts.size()) == c.num_experts && !w.router.empty(),
               "a mixture of {} experts needs its router and every expert's weights",
               c.num_experts);
}

}  // namespace

void route_tokens(const float* logits, int64_t N, int64_t X, int64_t K, float* probs,
                  MoeRouting& routing) {
  routing.top_index.resize(static_cast<size_t>(N * K));
  routing.top_weight.resize(static_cast<size_t>(N * K));
  std::vector<int32_t> order(static_cast<size_t>(X));
  for (int64_t t = 0; t < N; ++t) {
    const float* g = logits + t * X;
    // Softmax over all experts in double, rounded once (the load-balance statistics read it).
    const double max_logit = *std::max_element(g, g + X);
    double total = 0.0;
    for (int64_t x = 0; x < X; ++x) total += std::exp(double(g[x]) - max_logit);
    for (int64_t x = 0; x < X; ++x) {
      probs[t * X + x] = static_cast<float>(std::exp(double(g[x]) - max_logit) / total);
    }
    // Top K by logit; an equal logit ranks the lower index first (stable sort on index order).
    for (int64_t x = 0; x < X; ++x) order[x] = static_cast<int32_t>(x);
    std::stable_sort(order.begin(), order.end(), [g](int32_t a, int32_t b) { return g[a] > g[b]; });
    double chosen_total = 0.0;
    const double best = g[order[0]];
    for (int64_t j = 0; j < K; ++j) chosen_total += std::exp(double(g[order[j]]) - best);
    for (int64_t j = 0; j < K; ++j) {
      routing.top_index[t * K + j] = order[j];
      routing.top_weight[t * K + j] =
          static_cast<float>(std::exp(double(g[order[j]]) - best) / chosen_total);
    }
  }
}

int64_t expert_capacity(int64_t seq, int64_t X, int64_t K, double capacity_factor) {
  if (capacity_factor <= 0) return seq;
  // MaxText: int(max(ceil(tokens_per_batch / num_experts) * capacity_factor, capacity_factor)),
  // tokens_per_batch = S·K; int() truncates toward zero.
  const double per_expert = static_cast<double>((seq * K + X - 1) / X);
  const auto capacity =
      static_cast<int64_t>(std::max(per_expert * capacity_factor, capacity_factor));
  if (capacity < 1) {
    // MaxText's max(·, capacity_factor) is there "to avoid expert_capacity_per_batch = 0", which
    // a factor below 1 still reaches; a capacity of 0 would drop every choice, so the MoE layer
    // would add nothing. Refused (the same verdict on every rank: the inputs are the run's).
    fail(
        "capacity_factor = {} gives an expert capacity of 0 tokens for a sequence of {} tokens "
        "({} choices each over {} experts: int(max(ceil({}·{}/{})·{}, {})) = 0), so every "
        "choice would be dropped; set capacity_factor >= 1 (at least one slot per expert on any "
        "sequence) or <= 0 (no dropping)",
        capacity_factor, seq, K, X, seq, K, X, capacity_factor, capacity_factor);
  }
  return capacity;
}

void sparse_dispatch(const MoeRouting& routing, int64_t N, int64_t X, int64_t K, MoeDispatch& d) {
  d.expert_begin.assign(static_cast<size_t>(X + 1), 0);
  for (int64_t i = 0; i < N * K; ++i) ++d.expert_begin[routing.top_index[i] + 1];
  for (int64_t x = 0; x < X; ++x) d.expert_begin[x + 1] += d.expert_begin[x];
  d.row_token.assign(static_cast<size_t>(N * K), -1);
  d.choice_row.assign(static_cast<size_t>(N * K), -1);
  std::vector<int64_t> next(d.expert_begin.begin(), d.expert_begin.end() - 1);
  // Token order within each expert: a counting sort is stable.
  for (int64_t t = 0; t < N; ++t) {
    for (int64_t j = 0; j < K; ++j) {
      const int64_t row = next[routing.top_index[t * K + j]]++;
      d.row_token[row] = t;
      d.choice_row[t * K + j] = row;
    }
  }
}

void dense_dispatch(const MoeRouting& routing, int64_t batch, int64_t seq, int64_t X, int64_t K,
                    int64_t capacity, MoeDispatch& d) {
  // One chunk per row counted from zero: the one-rank plan.
  const std::vector<int64_t> no_offsets(static_cast<size_t>(batch * X), 0);
  dense_dispatch_chunks(routing, batch, seq, X, K, capacity, capacity, 1, no_offsets, d);
}

void sequence_statistics(const MoeRouting& routing, const float* probs, int64_t batch, int64_t seq,
                         int64_t X, int64_t K, float* stats) {
  std::vector<double> prob_sum(static_cast<size_t>(X));
  for (int64_t b = 0; b < batch; ++b) {
    float* choices = stats + b * 2 * X;
    std::fill(choices, choices + X, 0.0f);
    std::fill(prob_sum.begin(), prob_sum.end(), 0.0);
    for (int64_t s = 0; s < seq; ++s) {
      const int64_t t = b * seq + s;
      for (int64_t j = 0; j < K; ++j) choices[routing.top_index[t * K + j]] += 1.0f;
      for (int64_t x = 0; x < X; ++x) prob_sum[x] += probs[t * X + x];
    }
    for (int64_t x = 0; x < X; ++x) choices[X + x] = static_cast<float>(prob_sum[x]);
  }
}

namespace {

// S of sequence b from its whole-sequence statistics (every token makes K choices).
double sequence_length(const float* stats, int64_t b, int64_t X, int64_t K) {
  double choices = 0.0;
  for (int64_t x = 0; x < X; ++x) choices += stats[b * 2 * X + x];
  return choices / static_cast<double>(K);
}

}  // namespace

double load_balance_sum(const float* stats, int64_t batch, int64_t local_seq, int64_t X, int64_t K,
                        double weight) {
  double sum = 0.0;
  for (int64_t b = 0; b < batch; ++b) {
    const float* choices = stats + b * 2 * X;
    const double S = sequence_length(stats, b, X, K);
    double term = 0.0;
    for (int64_t x = 0; x < X; ++x) term += (choices[x] / S) * (choices[X + x] / S);
    sum += static_cast<double>(local_seq) / S * static_cast<double>(X) * weight * term;
  }
  return sum;
}

MoeBuffers allocate_moe_buffers(const kernels::Kernels& k, const LlamaConfig& c, int64_t batch,
                                int64_t seq, int64_t context) {
  MoeBuffers b;
  reserve_rows(k, c, batch * seq, moe_dispatch_rows(c, batch, seq, context), b);
  return b;
}

MoeGradBuffers allocate_moe_grad_buffers(const kernels::Kernels& k, const LlamaConfig& c,
                                         int64_t batch, int64_t seq, int64_t context) {
  MoeGradBuffers g;
  reserve_grad_rows(k, c, batch * seq, moe_dispatch_rows(c, batch, seq, context), g);
  return g;
}

int64_t moe_most_received_rows(const LlamaConfig& c, int64_t batch, int64_t seq, int64_t context,
                               int64_t expert_ranks) {
  if (!c.sparse_matmul || expert_ranks <= 1) return moe_dispatch_rows(c, batch, seq, context);
  const int64_t held = c.num_experts / expert_ranks;
  return expert_ranks * batch * seq * std::min(held, c.num_experts_per_tok);
}

MoeBufferBytes moe_buffer_bytes(const LlamaConfig& c, int64_t batch, int64_t seq, int64_t context,
                                int64_t expert_ranks, int64_t received_rows) {
  const int64_t N = batch * seq;
  const int64_t R = moe_dispatch_rows(c, batch, seq, context);
  const int64_t statistics =
      c.load_balance_loss_weight > 0 ? batch * 2 * c.num_experts * int64_t{sizeof(float)} : 0;
  // Under the expert axis moe_forward and moe_backward reserve every row buffer for the rows
  // sent and those received, and add the exchange's own buffers; without it L = R.
  const bool exchange = expert_ranks > 1;
  const int64_t L = exchange && received_rows >= 0 ? received_rows : R;
  const int64_t rows = std::max(R, L);
  const int64_t row_f32 = c.emb_dim * int64_t{sizeof(float)};
  const int64_t send_in = R * c.emb_dim * static_cast<int64_t>(dtype_size(c.dtype));
  const int64_t local_out = L * row_f32, d_local_and_d_in_local = 2 * L * row_f32;
  return {bytes_of(forward_fields(c, N, rows)) + statistics + (exchange ? send_in + local_out : 0),
          bytes_of(backward_fields(c, N, rows)) + (exchange ? d_local_and_d_in_local : 0)};
}

void moe_forward(const kernels::Kernels& k, const LlamaConfig& c, const MoeLayerWeights& w,
                 int64_t batch, int64_t seq, TensorView x, TensorView out, MoeBuffers& b,
                 parallel::TensorReducer* sequence, parallel::ExpertExchange* experts,
                 parallel::SequenceChunks* chunks) {
  check_weights(c, w);
  const auto [N, E, F, X, K] = moe_dims(c, w, batch, seq, experts);
  MAXCTX_CHECK(x.numel() == N * E && out.numel() == N * E, "MoE input/output of {} tokens", N);
  // Dropping under context counts across the ranks' chunks; without dropping nothing needs it.
  const bool chunked = chunks != nullptr && !c.sparse_matmul && c.capacity_factor > 0;
  reserve_rows(k, c, N, moe_dispatch_rows(c, batch, seq, chunked ? chunks->ranks() : 1), b);
  const TensorView logits = leading_rows(b.router_logits, N, X);
  const TensorView probs = leading_rows(b.router_probs, N, X);
  k.matmul_forward(logits, x.reshaped({N, E}), w.router);
  route_tokens(logits.data<float>(), N, X, K, probs.data<float>(), b.routing);
  if (c.sparse_matmul) {
    sparse_dispatch(b.routing, N, X, K, b.dispatch);
  } else if (chunked) {
    context_dense_dispatch(b.routing, batch, seq, X, K, c.capacity_factor, *chunks, b.dispatch);
  } else {
    dense_dispatch(b.routing, batch, seq, X, K, expert_capacity(seq, X, K, c.capacity_factor),
                   b.dispatch);
  }
  b.dropped = dropped_choices(b.dispatch);
  b.load_balance = 0.0;
  if (c.load_balance_loss_weight > 0) {
    k.reserve(b.statistics, batch * 2 * X);
    const TensorView stats = leading_rows(b.statistics, batch, 2 * X);
    sequence_statistics(b.routing, probs.data<float>(), batch, seq, X, K, stats.data<float>());
    if (sequence != nullptr) sequence->all_reduce_sum(stats);
    b.load_balance =
        load_balance_sum(stats.data<float>(), batch, seq, X, K, c.load_balance_loss_weight);
  }

  const int64_t R = b.dispatch.rows();
  const TensorView x_rows = x.reshaped({N, E});
  const bool exchanged = exchanges(experts);
  if (exchanged) k.reserve(b.send_in, R * E, c.dtype);
  // The dispatch's rows: what runs here, or under the expert axis what travels.
  const TensorView dispatched = leading_rows(exchanged ? b.send_in : b.expert_in, R, E);
  for (int64_t r = 0; r < R; ++r) {
    const int64_t t = b.dispatch.row_token[r];
    if (t < 0) {
      k.fill_zero(dispatched.rows(r, r + 1));
    } else {
      k.copy(dispatched.rows(r, r + 1), x_rows.rows(t, t + 1));
    }
  }
  if (exchanged) {
    exchange_segments(b.dispatch, X, *experts, b);
    reserve_rows(k, c, N, b.local_rows, b);
    k.reserve(b.local_out, b.local_rows * E);
    experts->exchange_rows(dispatched, b.send_rows, leading_rows(b.expert_in, b.local_rows, E),
                           b.recv_rows);
  } else {
    local_segments(b.dispatch, b);
  }
  const int64_t L = b.local_rows;
  const ExpertRows rows = expert_rows(b, L, E, F);
  const TensorView y = leading_rows(exchanged ? b.local_out : b.expert_out, L, E);
  for (const ExpertSegment& segment : b.segments) {
    const int64_t r0 = segment.begin, r1 = segment.end;
    const ExpertWeights& ew = w.experts[segment.expert];
    if (ew.w_gate_i8 != nullptr) {
      // int8 experts (inference): the input rows quantized per row, as model/decoder_layer.cpp's
      // project does for a dense model's projections; w1 and w3 share one quantization.
      k.int8_quantize_rows(b.int8_rows, rows.in.rows(r0, r1));
      k.int8_matmul_forward(rows.gate.rows(r0, r1), b.int8_rows, *ew.w_gate_i8);
      k.int8_matmul_forward(rows.up.rows(r0, r1), b.int8_rows, *ew.w_up_i8);
      k.swiglu_forward(rows.hidden.rows(r0, r1), rows.gate.rows(r0, r1), rows.up.rows(r0, r1));
      k.int8_quantize_rows(b.int8_rows, rows.hidden.rows(r0, r1));
      k.int8_matmul_forward(y.rows(r0, r1), b.int8_rows, *ew.w_down_i8);
      continue;
    }
    k.matmul_forward(rows.gate.rows(r0, r1), rows.in.rows(r0, r1), ew.w_gate);
    k.matmul_forward(rows.up.rows(r0, r1), rows.in.rows(r0, r1), ew.w_up);
    k.swiglu_forward(rows.hidden.rows(r0, r1), rows.gate.rows(r0, r1), rows.up.rows(r0, r1));
    k.matmul_forward(y.rows(r0, r1), rows.hidden.rows(r0, r1), ew.w_down);
  }
  const TensorView outputs = leading_rows(b.expert_out, R, E);  // in dispatch order
  if (exchanged) experts->exchange_rows(y, b.recv_rows, outputs, b.send_rows);

  // Combine in f32, each token's choices in order.
  gather_choices(b.dispatch, N, K, E, b.routing.top_weight.data(), outputs.data<float>(),
                 out.data<float>());
}

void moe_backward(const kernels::Kernels& k, const LlamaConfig& c, const MoeLayerWeights& w,
                  const MoeLayerWeights& g, int64_t batch, int64_t seq, TensorView x,
                  TensorView d_out, TensorView d_x, MoeBuffers& b, MoeGradBuffers& gb,
                  float d_load_balance, parallel::TensorReducer* tensor,
                  parallel::ExpertExchange* experts) {
  check_weights(c, w);
  check_weights(c, g);
  const auto [N, E, F, X, K] = moe_dims(c, w, batch, seq, experts);
  const int64_t R = b.dispatch.rows();
  const int64_t L = b.local_rows;
  const bool exchanged = exchanges(experts);
  MAXCTX_CHECK(static_cast<int64_t>(b.routing.top_index.size()) == N * K,
               "MoE backward without the forward of the same {} tokens", N);
  reserve_grad_rows(k, c, N, std::max(R, L), gb);
  if (exchanged) {
    k.reserve(gb.d_local, L * E);
    k.reserve(gb.d_in_local, L * E);
  }
  const float* dy = d_out.data<float>();
  const float* y = leading_rows(b.expert_out, R, E).data<float>();

  // Each expert output row's gradient (its weight times the token's), and each weight's.
  const TensorView d_rows = leading_rows(gb.d_rows, R, E);
  float* dr = d_rows.data<float>();
  std::fill(dr, dr + R * E, 0.0f);
  // Under tensor parallelism y holds this rank's part of each expert's output (its hidden
  // units' share): the weights' gradients are summed over tensor below.
  float* d_weight = leading_rows(gb.d_choice_weight, N, K).data<float>();
  std::fill(d_weight, d_weight + N * K, 0.0f);
  for (int64_t t = 0; t < N; ++t) {
    for (int64_t j = 0; j < K; ++j) {
      const int64_t row = b.dispatch.choice_row[t * K + j];
      if (row < 0) continue;
      const float weight = b.routing.top_weight[t * K + j];
      double dot = 0.0;
      for (int64_t i = 0; i < E; ++i) {
        dot += double(dy[t * E + i]) * y[row * E + i];
        dr[row * E + i] = weight * dy[t * E + i];
      }
      d_weight[t * K + j] = static_cast<float>(dot);
    }
  }
  if (tensor != nullptr) tensor->all_reduce_sum(leading_rows(gb.d_choice_weight, N, K));

  // Under the expert axis the rows' gradients go where their experts ran.
  const TensorView d_ran = exchanged ? leading_rows(gb.d_local, L, E) : d_rows;
  if (exchanged) experts->exchange_rows(d_rows, b.send_rows, d_ran, b.recv_rows);
  const ExpertRows rows = expert_rows(b, L, E, F);
  const TensorView d_hidden = leading_rows(gb.d_hidden, L, F);
  const TensorView d_gate = leading_rows(gb.d_gate, L, F);
  const TensorView d_up = leading_rows(gb.d_up, L, F);
  const TensorView d_in_ran = leading_rows(exchanged ? gb.d_in_local : gb.d_in, L, E);
  for (const ExpertSegment& segment : b.segments) {
    const int64_t r0 = segment.begin, r1 = segment.end;
    const ExpertWeights& ew = w.experts[segment.expert];
    const ExpertWeights& eg = g.experts[segment.expert];
    k.matmul_backward(d_hidden.rows(r0, r1), eg.w_down, d_ran.rows(r0, r1),
                      rows.hidden.rows(r0, r1), ew.w_down);
    k.swiglu_backward(d_gate.rows(r0, r1), d_up.rows(r0, r1), d_hidden.rows(r0, r1),
                      rows.gate.rows(r0, r1), rows.up.rows(r0, r1));
    k.matmul_backward(d_in_ran.rows(r0, r1), eg.w_gate, d_gate.rows(r0, r1), rows.in.rows(r0, r1),
                      ew.w_gate);
    k.matmul_backward_accumulate_input(d_in_ran.rows(r0, r1), eg.w_up, d_up.rows(r0, r1),
                                       rows.in.rows(r0, r1), ew.w_up);
  }
  const TensorView d_in = leading_rows(gb.d_in, R, E);  // in dispatch order
  if (exchanged) experts->exchange_rows(d_in_ran, b.recv_rows, d_in, b.send_rows);

  // Scatter the rows' input gradients back to their tokens, each token's choices in order.
  gather_choices(b.dispatch, N, K, E, nullptr, d_in.data<float>(), d_x.data<float>());
  // w1 and w3 are column-parallel: their input gradients are partial sums over tensor ranks
  // (the router's, added below, is whole on every rank).
  if (tensor != nullptr) tensor->all_reduce_sum(d_x);

  // Router logits: through the softmax over the chosen logits (a dropped choice still shares
  // the normalisation), and through p for the load-balance loss.
  const TensorView d_logits = leading_rows(gb.d_logits, N, X);
  float* dg = d_logits.data<float>();
  std::fill(dg, dg + N * X, 0.0f);
  for (int64_t t = 0; t < N; ++t) {
    double weighted = 0.0;  // Σ_i w_i · dL/dw_i
    for (int64_t j = 0; j < K; ++j)
      weighted += b.routing.top_weight[t * K + j] * d_weight[t * K + j];
    for (int64_t j = 0; j < K; ++j) {
      const double wj = b.routing.top_weight[t * K + j];
      dg[t * X + b.routing.top_index[t * K + j]] =
          static_cast<float>(wj * (d_weight[t * K + j] - weighted));
    }
  }
  if (c.load_balance_loss_weight > 0 && d_load_balance != 0.0f) {
    // d(term)/dp[b,s,x] = X · weight · density[b,x] / S over the whole sequence's statistics
    // (the term counts once in the loss, whichever ranks hold the sequence).
    const float* p = leading_rows(b.router_probs, N, X).data<float>();
    const float* stats = leading_rows(b.statistics, batch, 2 * X).data<float>();
    std::vector<double> dp(static_cast<size_t>(X));
    for (int64_t bi = 0; bi < batch; ++bi) {
      const double S = sequence_length(stats, bi, X, K);
      for (int64_t e = 0; e < X; ++e) {
        dp[e] = double(d_load_balance) * X * c.load_balance_loss_weight *
                (stats[bi * 2 * X + e] / S) / S;
      }
      for (int64_t s = 0; s < seq; ++s) {
        const int64_t t = bi * seq + s;
        double p_dot_dp = 0.0;
        for (int64_t e = 0; e < X; ++e) p_dot_dp += p[t * X + e] * dp[e];
        for (int64_t e = 0; e < X; ++e) {
          dg[t * X + e] += static_cast<float>(p[t * X + e] * (dp[e] - p_dot_dp));
        }
      }
    }
  }
  k.matmul_backward_accumulate_input(d_x.reshaped({N, E}), g.router, d_logits, x.reshaped({N, E}),
                                     w.router);
}

}  // namespace maxctx::model

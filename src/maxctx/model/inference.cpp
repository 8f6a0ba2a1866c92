#include "maxctx/model/inference.h"

#include <algorithm>
#include <initializer_list>
#include <utility>

#include "maxctx/core/check.h"
#include "maxctx/kernels/cpu/elementwise.h"
#include "maxctx/kernels/cpu/embedding.h"
#include "maxctx/kernels/cpu/matmul.h"
#include "maxctx/kernels/cpu/rmsnorm.h"
#include "maxctx/kernels/cpu/rope.h"
#include "maxctx/kernels/cpu/swiglu.h"
#include "maxctx/mesh/communicator.h"

namespace maxctx::model {
namespace {

namespace k = kernels::cpu;

InferenceLinear linear_of(const float* w, int64_t out_dim, int64_t in_dim) {
  InferenceLinear l;
  l.f32 = w;
  l.out_dim = out_dim;
  l.in_dim = in_dim;
  return l;
}

// outs[i].second (N, outs[i].first->out_dim) = in (N, in_dim) · Wᵀ for projections sharing one
// input, which int8 quantizes once.
void project(InferenceWorkspace& ws, const float* in, int64_t N,
             std::initializer_list<std::pair<const InferenceLinear*, float*>> outs) {
  const InferenceLinear& first = *outs.begin()->first;
  if (first.i8 != nullptr) {
    k::int8_quantize_rows(ws.int8_rows, in, N, first.in_dim);
    for (const auto& [w, out] : outs) k::int8_matmul_forward(out, ws.int8_rows, *w->i8);
    return;
  }
  // One token (batch-1 decode) is a matrix-vector product, which matmul_forward streams once.
  for (const auto& [w, out] : outs) k::matmul_forward(out, in, w->f32, N, w->in_dim, w->out_dim);
}

// A row split's part of a projection: its rows, then the gather of every rank's rows.
void project_split(InferenceWorkspace& ws, RowSplit& split, const float* in, int64_t N,
                   const InferenceLinear& part, float* out, int64_t out_dim) {
  ws.part.resize(static_cast<size_t>(N * part.out_dim));
  project(ws, in, N, {{&part, ws.part.data()}});
  split.gather(out, ws.part.data(), N, out_dim);
}

int64_t linear_bytes(const InferenceLinear& l) {
  if (l.i8 != nullptr) return l.out_dim * l.in_dim + 2 * l.out_dim * int64_t{sizeof(float)};
  return l.out_dim * l.in_dim * int64_t{sizeof(float)};
}

}  // namespace

InferenceWeights::InferenceWeights(const LlamaConfig& c, const LlamaWeights& w, bool quantize_int8,
                                   RowSplitPart part)
    : split(part) {
  const int64_t E = c.emb_dim, F = c.mlp_dim, V = c.vocab_size;
  MAXCTX_CHECK(part.ranks >= 1 && part.rank >= 0 && part.rank < part.ranks,
               "row split part {} of {}", part.rank, part.ranks);
  embed = w.embed;
  final_norm = w.final_norm;
  lm_head = linear_of(w.lm_head, V, E);
  for (const LayerWeights& lw : w.layers) {
    layers.push_back({lw.attn_norm, linear_of(lw.wq, c.q_dim(), E), linear_of(lw.wk, c.kv_dim(), E),
                      linear_of(lw.wv, c.kv_dim(), E), linear_of(lw.wo, E, c.q_dim()), lw.mlp_norm,
                      linear_of(lw.w_gate, F, E), linear_of(lw.w_up, F, E),
                      linear_of(lw.w_down, E, F)});
  }
  if (part.ranks > 1) {
    auto rows = [&](const float* m, int64_t out_dim, int64_t in_dim) {  // this rank's rows of m
      const int64_t first = split_offset(out_dim, part.ranks, part.rank);
      return linear_of(m + first * in_dim, split_count(out_dim, part.ranks, part.rank), in_dim);
    };
    lm_head_part = rows(w.lm_head, V, E);
    for (const LayerWeights& lw : w.layers) {
      mlp_parts.push_back({rows(lw.w_gate, F, E), rows(lw.w_up, F, E), rows(lw.w_down, E, F)});
    }
  }
  if (!quantize_int8) return;
  std::vector<InferenceLinear*> all;
  for (InferenceLayer& l : layers) {
    for (InferenceLinear* p : {&l.wq, &l.wk, &l.wv, &l.wo, &l.w_gate, &l.w_up, &l.w_down}) {
      all.push_back(p);
    }
  }
  all.push_back(&lm_head);
  // A part's rows quantize to the same codes and scales as in the whole matrix (per-row scales).
  for (InferenceMlpPart& m : mlp_parts) {
    for (InferenceLinear* p : {&m.w_gate, &m.w_up, &m.w_down}) all.push_back(p);
  }
  if (!mlp_parts.empty()) all.push_back(&lm_head_part);
  // Filled completely before any pointer into it is taken.
  quantized_.reserve(all.size());
  for (InferenceLinear* p : all) {
    quantized_.push_back(k::int8_pack_weights(p->f32, p->out_dim, p->in_dim));
  }
  for (size_t i = 0; i < all.size(); ++i) {
    all[i]->i8 = &quantized_[i];
    all[i]->f32 = nullptr;
  }
}

int64_t InferenceWeights::bytes_per_step(bool row_split) const {
  MAXCTX_CHECK(!row_split || !mlp_parts.empty(), "these weights hold no row split");
  int64_t bytes =
      linear_bytes(row_split ? lm_head_part : lm_head) + lm_head.in_dim * int64_t{sizeof(float)};
  for (size_t i = 0; i < layers.size(); ++i) {
    const InferenceLayer& l = layers[i];
    for (const InferenceLinear* p : {&l.wq, &l.wk, &l.wv, &l.wo}) bytes += linear_bytes(*p);
    if (row_split) {
      const InferenceMlpPart& m = mlp_parts[i];
      for (const InferenceLinear* p : {&m.w_gate, &m.w_up, &m.w_down}) bytes += linear_bytes(*p);
    } else {
      for (const InferenceLinear* p : {&l.w_gate, &l.w_up, &l.w_down}) bytes += linear_bytes(*p);
    }
    bytes += 2 * l.wq.in_dim * int64_t{sizeof(float)};
  }
  return bytes;
}

InferenceWorkspace allocate_inference_workspace(const LlamaConfig& c, int64_t max_rows) {
  MAXCTX_CHECK_GT(max_rows, 0, "an inference workspace needs at least one row");
  const int64_t N = max_rows;
  InferenceWorkspace ws;
  ws.max_rows = N;
  ws.residual = Tensor({N, c.emb_dim});
  ws.normed = Tensor({N, c.emb_dim});
  ws.rstd = Tensor({N});
  ws.q = Tensor({N, c.num_query_heads, c.head_dim});
  ws.k = Tensor({N, c.num_kv_heads, c.head_dim});
  ws.v = Tensor({N, c.num_kv_heads, c.head_dim});
  ws.attn = Tensor({N, c.num_query_heads, c.head_dim});
  ws.proj = Tensor({N, c.emb_dim});
  ws.gate = Tensor({N, c.mlp_dim});
  ws.up = Tensor({N, c.mlp_dim});
  ws.hidden = Tensor({N, c.mlp_dim});
  ws.rope_cos = Tensor({N, c.head_dim / 2});
  ws.rope_sin = Tensor({N, c.head_dim / 2});
  ws.head_in = Tensor({N, c.emb_dim});
  return ws;
}

void llama_inference_forward(const LlamaConfig& c, const InferenceWeights& w, const TokenBatch& b,
                             InferenceAttention& attention, InferenceWorkspace& ws,
                             std::span<const int64_t> logit_rows, float* logits,
                             RowSplit* row_split) {
  const int64_t N = b.batch * b.seq;
  const int64_t E = c.emb_dim, Hq = c.num_query_heads, Hkv = c.num_kv_heads, D = c.head_dim;
  const int64_t F = c.mlp_dim;
  MAXCTX_CHECK(N > 0 && N <= ws.max_rows, "{} tokens for a workspace of {} rows", N, ws.max_rows);
  MAXCTX_CHECK_EQ(static_cast<int64_t>(w.layers.size()), c.num_layers, "weights of another model");
  if (row_split != nullptr) {
    const RowSplitPart part = row_split->part();
    MAXCTX_CHECK(!w.mlp_parts.empty() && part.rank == w.split.rank && part.ranks == w.split.ranks,
                 "a row split over {} ranks needs weights built for the same part", part.ranks);
  }
  float* x = ws.residual.data<float>();
  float* normed = ws.normed.data<float>();
  float* rstd = ws.rstd.data<float>();
  float* q = ws.q.data<float>();
  float* kk = ws.k.data<float>();
  float* v = ws.v.data<float>();
  float* attn = ws.attn.data<float>();
  float* proj = ws.proj.data<float>();
  const float* cos = ws.rope_cos.data<float>();
  const float* sin = ws.rope_sin.data<float>();
  k::rope_cos_sin(ws.rope_cos.data<float>(), ws.rope_sin.data<float>(), b.positions, N, D, c.rope);
  kernels::AttentionParams dims;
  dims.heads_q = Hq;
  dims.heads_kv = Hkv;
  dims.head_dim = D;
  dims.sliding_window = c.sliding_window;
  const parallel::TokenLayout tokens{b.batch, b.seq, b.positions, b.segment_ids};

  k::embedding_forward(x, b.tokens, w.embed, N, E, c.vocab_size);
  for (int64_t l = 0; l < c.num_layers; ++l) {
    const InferenceLayer& lw = w.layers[l];
    k::rmsnorm_forward(normed, rstd, x, lw.attn_norm, N, E, c.norm_eps);
    project(ws, normed, N, {{&lw.wq, q}, {&lw.wk, kk}, {&lw.wv, v}});
    k::rope_forward(q, q, cos, sin, N, Hq, D);
    k::rope_forward(kk, kk, cos, sin, N, Hkv, D);
    attention.forward(l, attn, q, kk, v, tokens, dims);
    project(ws, attn, N, {{&lw.wo, proj}});
    k::add_inplace(x, proj, N * E);  // a + b == b + a: the training forward's bits

    k::rmsnorm_forward(normed, rstd, x, lw.mlp_norm, N, E, c.norm_eps);
    float* gate = ws.gate.data<float>();
    float* up = ws.up.data<float>();
    float* hidden = ws.hidden.data<float>();
    if (row_split != nullptr) {
      // This rank's hidden units (gate and up hold (N, Fr)), gathered; then its output rows.
      const InferenceMlpPart& part = w.mlp_parts[l];
      const int64_t Fr = part.w_gate.out_dim;
      project(ws, normed, N, {{&part.w_gate, gate}, {&part.w_up, up}});
      ws.part.resize(static_cast<size_t>(N * Fr));
      k::swiglu_forward(ws.part.data(), gate, up, N, Fr);
      row_split->gather(hidden, ws.part.data(), N, F);
      project_split(ws, *row_split, hidden, N, part.w_down, proj, E);
    } else {
      project(ws, normed, N, {{&lw.w_gate, gate}, {&lw.w_up, up}});
      k::swiglu_forward(hidden, gate, up, N, F);
      project(ws, hidden, N, {{&lw.w_down, proj}});
    }
    k::add_inplace(x, proj, N * E);
  }

  const int64_t R = static_cast<int64_t>(logit_rows.size());
  if (R == 0) return;
  float* head_in = ws.head_in.data<float>();
  for (int64_t r = 0; r < R; ++r) {
    const int64_t row = logit_rows[r];
    MAXCTX_CHECK(row >= 0 && row < N, "logit row {} outside the batch's {} rows", row, N);
    std::copy(x + row * E, x + (row + 1) * E, head_in + r * E);
  }
  k::rmsnorm_forward(normed, rstd, head_in, w.final_norm, R, E, c.norm_eps);
  if (row_split != nullptr) {
    project_split(ws, *row_split, normed, R, w.lm_head_part, logits, c.vocab_size);
  } else {
    project(ws, normed, R, {{&w.lm_head, logits}});
  }
}

}  // namespace maxctx::model

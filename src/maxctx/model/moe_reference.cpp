#include "maxctx/model/moe_reference.h"

#include <cmath>

namespace maxctx::model {
namespace {

double silu(double v) { return v / (1.0 + std::exp(-v)); }

// row · x for a (rows, cols) f32 matrix.
double dot_row(const TensorView& m, int64_t row, const float* x) {
  const int64_t cols = m.shape()[1];
  const float* w = m.data<float>() + row * cols;
  double sum = 0.0;
  for (int64_t i = 0; i < cols; ++i) sum += double(w[i]) * x[i];
  return sum;
}

}  // namespace

MoeReferenceResult moe_reference_forward(const LlamaConfig& c, const MoeLayerWeights& w,
                                         int64_t batch, int64_t seq, const float* x,
                                         int64_t capacity) {
  const int64_t E = c.emb_dim, F = c.mlp_dim, X = c.num_experts, K = c.num_experts_per_tok;
  const int64_t N = batch * seq;
  MoeReferenceResult r;
  r.out.assign(static_cast<size_t>(N * E), 0.0f);
  r.kept.assign(static_cast<size_t>(N * K), 0);
  std::vector<int32_t> chosen(static_cast<size_t>(N * K));
  std::vector<double> probs(static_cast<size_t>(N * X));
  for (int64_t t = 0; t < N; ++t) {
    const float* xt = x + t * E;
    // The logits as the engine rounds them (f32), so that both pick the same experts.
    std::vector<double> logit(static_cast<size_t>(X));
    for (int64_t e = 0; e < X; ++e) logit[e] = static_cast<float>(dot_row(w.router, e, xt));
    double total = 0.0;
    for (int64_t e = 0; e < X; ++e) total += std::exp(logit[e]);
    for (int64_t e = 0; e < X; ++e) probs[t * X + e] = std::exp(logit[e]) / total;
    // Choose K times the largest logit not yet chosen; the first (lowest index) on a tie.
    std::vector<bool> taken(static_cast<size_t>(X), false);
    double chosen_total = 0.0;
    for (int64_t j = 0; j < K; ++j) {
      int64_t best = -1;
      for (int64_t e = 0; e < X; ++e) {
        if (!taken[e] && (best < 0 || logit[e] > logit[best])) best = e;
      }
      taken[best] = true;
      chosen[t * K + j] = static_cast<int32_t>(best);
      chosen_total += std::exp(logit[best]);
    }
    const int64_t s = t % seq;
    for (int64_t j = 0; j < K; ++j) {
      const int32_t e = chosen[t * K + j];
      int64_t earlier = 0;
      for (int64_t t2 = t - s; t2 <= t; ++t2) {
        for (int64_t j2 = 0; j2 < K && (t2 < t || j2 < j); ++j2)
          earlier += chosen[t2 * K + j2] == e;
      }
      if (capacity > 0 && earlier >= capacity) continue;
      r.kept[t * K + j] = 1;
      const ExpertWeights& ew = w.experts[e];
      std::vector<float> hidden(static_cast<size_t>(F));
      for (int64_t f = 0; f < F; ++f) {
        hidden[f] = static_cast<float>(silu(dot_row(ew.w_gate, f, xt)) * dot_row(ew.w_up, f, xt));
      }
      const double weight = std::exp(logit[e]) / chosen_total;
      for (int64_t i = 0; i < E; ++i) {
        r.out[t * E + i] += static_cast<float>(weight * dot_row(ew.w_down, i, hidden.data()));
      }
    }
  }
  for (int64_t b = 0; b < batch; ++b) {
    double term = 0.0;
    for (int64_t e = 0; e < X; ++e) {
      double density = 0.0, mean_prob = 0.0;
      for (int64_t s = 0; s < seq; ++s) {
        const int64_t t = b * seq + s;
        for (int64_t j = 0; j < K; ++j) density += chosen[t * K + j] == e;
        mean_prob += probs[t * X + e];
      }
      term += (density / seq) * (mean_prob / seq);
    }
    r.load_balance += static_cast<double>(X) * c.load_balance_loss_weight * term;
  }
  return r;
}

}  // namespace maxctx::model

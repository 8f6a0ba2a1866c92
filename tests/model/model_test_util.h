// Helpers shared by the model tests: a flat parameter set with its gradient buffer, the
// norm-relative error used for whole tensors, a small mixture of experts and random values.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "maxctx/core/rng.h"
#include "maxctx/model/llama.h"
#include "maxctx/parallel/local_attention.h"

namespace maxctx::model::testing {

// max|a − b| / max|b|: the error relative to the tensor's scale, so that entries near zero
// (most logits of a softmax, many gradient entries) are judged against the tensor, not alone.
inline double norm_relative_error(const float* a, const float* b, int64_t n) {
  double max_diff = 0.0;
  double max_ref = 0.0;
  for (int64_t i = 0; i < n; ++i) {
    max_diff = std::max(max_diff, std::fabs(double(a[i]) - double(b[i])));
    max_ref = std::max(max_ref, std::fabs(double(b[i])));
  }
  return max_ref == 0.0 ? max_diff : max_diff / max_ref;
}

// A small Mixtral block's config: E 16, mlp_dim 24, 4 experts, 2 per token,
// load_balance_loss_weight 0.01, the dispatch path and capacity_factor given.
inline LlamaConfig small_moe(bool sparse, double capacity_factor = -1.0) {
  LlamaConfig c;
  c.emb_dim = 16;
  c.mlp_dim = 24;
  c.moe = true;
  c.num_experts = 4;
  c.num_experts_per_tok = 2;
  c.sparse_matmul = sparse;
  c.capacity_factor = capacity_factor;
  c.load_balance_loss_weight = 0.01;
  return c;
}

// n values N(0, stddev²) of counter stream `stream` (seed 7).
inline std::vector<float> random_values(int64_t n, uint64_t stream, float stddev) {
  std::vector<float> v(static_cast<size_t>(n));
  rng::fill_normal(v, 7, stream, 0, 0.0f, stddev);
  return v;
}

struct LocalModel {
  LlamaConfig config;
  std::vector<WeightSpec> specs;
  std::vector<float> params;
  std::vector<float> grads;
  LlamaWeights weights;
  LlamaWeights gradients;
  parallel::LocalAttention attention{kernels::backend(Device::kCpu)};
  parallel::NoTensorReduction no_reduction;
  parallel::ModelPlan plan;

  explicit LocalModel(const LlamaConfig& c)
      : config(c),
        specs(llama_weight_specs(c)),
        params(total_numel(specs)),
        grads(total_numel(specs)) {
    weights = bind_weights(specs, params.data());
    gradients = bind_weights(specs, grads.data());
    plan.kernels = &kernels::backend(Device::kCpu);
    plan.attention = &attention;
    plan.tensor = &no_reduction;
  }
};

// A two-layer GQA model small enough for finite differences.
inline LlamaConfig tiny_config() {
  LlamaConfig c;
  c.vocab_size = 40;
  c.emb_dim = 24;
  c.num_query_heads = 4;
  c.num_kv_heads = 2;
  c.head_dim = 6;
  c.mlp_dim = 32;
  c.num_layers = 2;
  c.norm_eps = 1e-5f;
  c.rope.theta = 10000.0;
  return c;
}

// Two rows of 12 random tokens: row 0 two documents (7 + 5), row 1 one document and 2 padding
// tokens.
struct RandomBatch {
  int64_t B = 2;
  int64_t S = 12;
  std::vector<int32_t> tokens, targets, positions, segments;
  std::vector<float> weights;

  RandomBatch(int64_t vocab) {
    tokens.resize(B * S);
    targets.resize(B * S);
    rng::fill_uniform_int(tokens, 5, 1, 0, static_cast<uint32_t>(vocab));
    rng::fill_uniform_int(targets, 5, 2, 0, static_cast<uint32_t>(vocab));
    for (int64_t b = 0; b < B; ++b) {
      for (int64_t s = 0; s < S; ++s) {
        // Row 0: two documents (7 + 5 tokens); row 1: one document and 2 padding tokens.
        const int32_t seg = b == 0 ? (s < 7 ? 1 : 2) : (s < 10 ? 1 : 0);
        segments.push_back(seg);
        positions.push_back(b == 0 ? (s < 7 ? s : s - 7) : s);
        weights.push_back(seg != 0 ? 1.0f : 0.0f);
      }
    }
  }
  TokenBatch view() const {
    return {B, S, tokens.data(), targets.data(), positions.data(), segments.data(), weights.data()};
  }
};

}  // namespace maxctx::model::testing

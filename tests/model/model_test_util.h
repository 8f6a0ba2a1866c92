// Helpers shared by the model tests: a flat parameter set with its gradient buffer, and the
// norm-relative error used for whole tensors.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

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

}  // namespace maxctx::model::testing

#include "maxctx/train/optimizer.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "maxctx/config/config.h"
#include "maxctx/core/check.h"

namespace maxctx {

AdamWConfig adamw_config(const Config& config) {
  AdamWConfig adamw;
  adamw.b1 = config.adam_b1;
  adamw.b2 = config.adam_b2;
  adamw.eps = config.adam_eps;
  adamw.eps_root = config.adam_eps_root;
  adamw.weight_decay = config.adam_weight_decay;
  return adamw;
}

void adamw_update(const kernels::Kernels& kernels, const AdamWConfig& config, int64_t step,
                  float learning_rate, std::span<float> params, std::span<const float> grads,
                  std::span<float> mu, std::span<float> nu) {
  const auto view = [](std::span<const float> v) {
    return TensorView::of(v.data(), static_cast<int64_t>(v.size()));
  };
  adamw_update(kernels, config, step, learning_rate, view(params), view(grads), view(mu), view(nu));
}

void adamw_update(const kernels::Kernels& kernels, const AdamWConfig& config, int64_t step,
                  float learning_rate, TensorView params, TensorView grads, TensorView mu,
                  TensorView nu) {
  MAXCTX_CHECK_GE(step, int64_t{1}, "the AdamW step count starts at 1");
  MAXCTX_CHECK(grads.numel() == params.numel() && mu.numel() == params.numel() &&
                   nu.numel() == params.numel(),
               "params {}, grads {}, mu {}, nu {} must have one length", params.numel(),
               grads.numel(), mu.numel(), nu.numel());
  // optax evaluates 1 − b^t in fp32; in double, rounded once, it is the exact value to 0.5 ulp
  // (a few fp32 ulps closer than optax's when b^t is near 1, the first steps).
  const auto t = static_cast<double>(step);
  const auto correction1 = static_cast<float>(1.0 - std::pow(config.b1, t));
  const auto correction2 = static_cast<float>(1.0 - std::pow(config.b2, t));
  const auto f32 = [](double x) { return static_cast<float>(x); };
  kernels::AdamWStep constants;
  constants.b1 = f32(config.b1);
  constants.b2 = f32(config.b2);
  constants.one_minus_b1 = f32(1.0 - config.b1);
  constants.one_minus_b2 = f32(1.0 - config.b2);
  constants.eps = f32(config.eps);
  constants.eps_root = f32(config.eps_root);
  constants.weight_decay = f32(config.weight_decay);
  constants.learning_rate = learning_rate;
  constants.correction1 = correction1;
  constants.correction2 = correction2;
  kernels.adamw_update(params, grads, mu, nu, constants);
}

double sum_of_squares(std::span<const float> values) {
  double sum = 0.0;
  for (float x : values) sum += static_cast<double>(x) * x;
  return sum;
}

void clip_by_global_norm(std::span<float> grads, double global_norm, double threshold) {
  if (threshold <= 0.0 || global_norm < threshold) return;
  const auto norm = static_cast<float>(global_norm);
  const auto max_norm = static_cast<float>(threshold);
  for (float& g : grads) g = (g / norm) * max_norm;
}

void clip_by_global_norm(const kernels::Kernels& kernels, TensorView grads, double global_norm,
                         double threshold) {
  if (threshold <= 0.0 || global_norm < threshold) return;
  // The host rule's two roundings, on the backend (no copy of the gradients either way).
  kernels.scale_by_ratio(grads, static_cast<float>(global_norm), static_cast<float>(threshold));
}

}  // namespace maxctx

// AdamW and global-norm gradient clipping over flat fp32 spans, as MaxText configures optax.
//
// MaxText's opt_type=adamw is optax.adamw(schedule, b1, b2, eps, eps_root, weight_decay) with no
// mask (optimizers.py), so weight decay applies to every parameter, norm scales and embeddings
// included; we match that. optax's update at count t (1 for the first step):
//   m = b1·m + (1−b1)·g;  v = b2·v + (1−b2)·g²;  m̂ = m / (1−b1^t);  v̂ = v / (1−b2^t)
//   u = m̂ / (sqrt(v̂ + eps_root) + eps) + wd·p;  p −= lr·u
// with lr = schedule(t − 1) (train/schedule.h). Clipping is optax.clip_by_global_norm as
// MaxText applies it before the optimizer when gradient_clipping_threshold > 0:
// g = norm < threshold ? g : (g / norm) · threshold. Master weights and both moments are in
// weight_dtype (f32 by default);
// a span may be any parameter range (an fsdp shard updates only its own), since every update is
// per element and the step count is shared.
#pragma once

#include <cstdint>
#include <span>

#include "maxctx/kernels/kernels.h"

namespace maxctx {

struct Config;

// The keys' values; the update rounds each constant (and 1 − b) to fp32 once, as JAX does with
// optax's Python-float hyperparameters.
struct AdamWConfig {
  double b1 = 0.9;
  double b2 = 0.95;
  double eps = 1e-8;
  double eps_root = 0.0;
  double weight_decay = 0.1;
};

// adam_b1, adam_b2, adam_eps, adam_eps_root, adam_weight_decay.
AdamWConfig adamw_config(const Config& config);

// One AdamW update of params (and the moments mu, nu, same length, zero before the first step).
// `step` is optax's count after the increment: 1 for the first update. The element update runs
// on `kernels` (the backend the parameters live on).
void adamw_update(const kernels::Kernels& kernels, const AdamWConfig& config, int64_t step,
                  float learning_rate, std::span<float> params, std::span<const float> grads,
                  std::span<float> mu, std::span<float> nu);
// The same on views: params and moments in the weights' dtype (f32 or bf16), grads f32; the
// update computes in f32 and rounds params and moments once.
void adamw_update(const kernels::Kernels& kernels, const AdamWConfig& config, int64_t step,
                  float learning_rate, TensorView params, TensorView grads, TensorView mu,
                  TensorView nu);

// Σ g² of a span in double (optax sums in fp32; double makes the norm independent of how the
// parameters are split). A distributed caller all-reduces the partial sums, then takes sqrt.
double sum_of_squares(std::span<const float> values);

// Scales grads as optax.clip_by_global_norm(threshold) does, given the global norm of all of
// them. threshold <= 0 leaves grads as they are (MaxText's "clipping off").
void clip_by_global_norm(std::span<float> grads, double global_norm, double threshold);
// The same on a view in `kernels`' memory (f32): scaled on a host copy by the rule above, so
// every backend clips bit for bit as the CPU does (a copy each way, only when clipping applies).
void clip_by_global_norm(const kernels::Kernels& kernels, TensorView grads, double global_norm,
                         double threshold);

}  // namespace maxctx

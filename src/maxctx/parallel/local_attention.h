// Attention when this rank holds whole sequences (context = 1): the kernel called directly with
// the tokens as both queries and keys. Also the single-device reference every
// context-parallel plan is compared against.
#pragma once

#include "maxctx/parallel/model_plan.h"

namespace maxctx::parallel {

class LocalAttention final : public AttentionPlan {
 public:
  explicit LocalAttention(const kernels::Kernels& kernels) : kernels_(kernels) {}
  void forward(float* out, float* lse, const float* q, const float* k, const float* v,
               const TokenLayout& tokens, const kernels::AttentionParams& dims) override;
  void backward(float* dq, float* dk, float* dv, const float* d_out, const float* out,
                const float* lse, const float* q, const float* k, const float* v,
                const TokenLayout& tokens, const kernels::AttentionParams& dims) override;
  kernels::AttentionStats stats() const override { return stats_; }

 private:
  const kernels::Kernels& kernels_;
  kernels::AttentionStats stats_;
};

}  // namespace maxctx::parallel

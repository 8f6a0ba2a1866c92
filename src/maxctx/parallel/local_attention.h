// Attention when this rank holds whole sequences (context = 1): the kernel called directly with
// the tokens as both queries and keys. Also the single-device reference every
// context-parallel plan is compared against.
#pragma once

#include "maxctx/parallel/model_plan.h"

namespace maxctx::parallel {

class LocalAttention final : public AttentionPlan {
 public:
  explicit LocalAttention(const kernels::Kernels& kernels) : kernels_(kernels) {}
  void forward(TensorView out, TensorView lse, TensorView q, TensorView k, TensorView v,
               const TokenLayout& tokens, const kernels::AttentionParams& dims) override;
  void backward(TensorView dq, TensorView dk, TensorView dv, TensorView d_out, TensorView out,
                TensorView lse, TensorView q, TensorView k, TensorView v, const TokenLayout& tokens,
                const kernels::AttentionParams& dims) override;
  kernels::AttentionStats stats() const override { return stats_; }

 private:
  const kernels::Kernels& kernels_;
  kernels::AttentionStats stats_;
};

}  // namespace maxctx::parallel

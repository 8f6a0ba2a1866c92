// What the model asks of parallelism: attention over this rank's tokens, and the tensor-axis
// all-reduce after row-parallel projections. Nothing else.
//
// The model (src/maxctx/model) never includes mesh/: it calls a ModelPlan that parallel/ built
// for the mesh at hand, so the model code is the same for context = 1 and context = 8, tensor = 1
// and tensor = 4. Implementations: LocalAttention (one rank holds the whole sequence), the
// context-parallel all_gather and ring plans, and the tensor-parallel reducer.
#pragma once

#include <cstdint>

#include "maxctx/kernels/ref/attention.h"

namespace maxctx::parallel {

// This rank's tokens: (batch, seq) row-major, seq = the local sequence length. Positions and
// segment ids are the tokens' own (after the dual chunk swap, not their row index).
struct TokenLayout {
  int64_t batch = 0;
  int64_t seq = 0;
  const int32_t* positions = nullptr;    // (batch, seq)
  const int32_t* segment_ids = nullptr;  // (batch, seq)
};

// Causal (segment- and window-masked) self-attention of this rank's queries against every key
// of their sequence, wherever those keys live. Shapes use this rank's heads (Hq, Hkv after the
// tensor split) and this rank's tokens:
//   q, out (B, S, Hq, D)   k, v (B, S, Hkv, D)   lse (B, Hq, S)
// `dims` carries heads, head_dim and the window; its batch/seq fields are ignored.
class AttentionPlan {
 public:
  virtual ~AttentionPlan() = default;
  virtual void forward(float* out, float* lse, const float* q, const float* k, const float* v,
                       const TokenLayout& tokens, const kernels::AttentionParams& dims) = 0;
  // dq, dk, dv (this rank's rows) are overwritten.
  virtual void backward(float* dq, float* dk, float* dv, const float* d_out, const float* out,
                        const float* lse, const float* q, const float* k, const float* v,
                        const TokenLayout& tokens, const kernels::AttentionParams& dims) = 0;
  // (query tile, key tile) blocks computed and skipped so far, for load-balance reports.
  virtual kernels::AttentionStats stats() const = 0;
};

// The sum over the tensor axis of a row-parallel projection's partial outputs (and of the
// input gradients of column-parallel ones). Identity when tensor = 1.
class TensorReducer {
 public:
  virtual ~TensorReducer() = default;
  virtual void all_reduce_sum(float* values, int64_t count) = 0;
};

// Where the weights live between uses (fsdp). The model names its weight units in the order it
// uses them: 0 = the token embedding, 1..L = decoder layers, L+1 = the final norm and output
// head (model/weights.h weight_units). before_use(u) comes before a unit's weights are read in
// a step; gradients_ready(u) once the backward has finished accumulating that unit's gradients.
// Null in the plan means the weights are simply resident and gradients stay where they are.
class WeightPlan {
 public:
  virtual ~WeightPlan() = default;
  virtual void before_use(int unit) = 0;
  virtual void gradients_ready(int unit) = 0;
};

struct ModelPlan {
  AttentionPlan* attention = nullptr;
  TensorReducer* tensor = nullptr;
  WeightPlan* weights = nullptr;
  int tensor_size = 1;
  int tensor_rank = 0;
};

}  // namespace maxctx::parallel

// The plain reference of the mixture-of-experts MLP (model/moe_block.h): one token at a time,
// straight from the definition, in double, with no dispatch plan, no sorting and no kernels.
// The tests hold moe_forward's sparse and dense paths against it. Not used by the engine.
//
// Dropping (dense dispatch, capacity > 0) is stated as the rule reads: choice j of token s of a
// sequence is kept iff fewer than `capacity` of the sequence's earlier (token, choice) pairs in
// (token, choice) order went to the same expert.
#pragma once

#include <cstdint>
#include <vector>

#include "maxctx/model/llama_config.h"
#include "maxctx/model/moe_block.h"

namespace maxctx::model {

struct MoeReferenceResult {
  std::vector<float> out;     // (N, E)
  double load_balance = 0.0;  // Σ over sequences of the per-sequence terms (moe_block.h)
  std::vector<int32_t> kept;  // (N, K) 1 where the choice ran, 0 where it was dropped
};

// x (N, E) f32, N = batch·seq; f32 weight views. capacity <= 0: nothing drops.
MoeReferenceResult moe_reference_forward(const LlamaConfig& config, const MoeLayerWeights& w,
                                         int64_t batch, int64_t seq, const float* x,
                                         int64_t capacity);

}  // namespace maxctx::model

// Fast masked softmax cross-entropy (Highway SIMD with a vectorized exp, OpenMP over rows).
//
// Same signatures and semantics as kernels/ref/cross_entropy.h: loss[i] = w[i]·(lse[i] −
// logits[i, target]); rows with weight 0 get loss 0 and d_logits 0 and their targets are not
// read; d_logits = d_loss·w·(softmax − onehot) is overwritten and may be logits (in place, which
// halves the memory of the largest activation). Targets are checked before any thread starts.
// logits and d_logits may be f32 or bf16 each (in place: the same dtype); loss, lse and weights
// are f32. A bf16 d_logits is rounded once, the target's entry included. The float* overloads
// are the fp32 case, with the reference's signatures.
#pragma once

#include <cstdint>

#include "maxctx/kernels/cpu/float_ptr.h"

namespace maxctx::kernels::cpu {

void cross_entropy_forward(float* loss,             // (N) weighted per-row loss
                           float* lse,              // (N) log-sum-exp of the row, saved
                           FloatPtr logits,         // (N, V)
                           const int32_t* targets,  // (N) read only where weights != 0
                           const float* weights,    // (N) 0 masks the row
                           int64_t N, int64_t V);

void cross_entropy_backward(FloatPtr d_logits,       // (N, V) overwritten; may be logits
                            FloatPtr logits,         // (N, V)
                            const float* lse,        // (N) from cross_entropy_forward
                            const int32_t* targets,  // (N)
                            const float* weights,    // (N)
                            float d_loss,            // dL/dloss_i, the same for every row
                            int64_t N, int64_t V);

inline void cross_entropy_forward(float* loss, float* lse, const float* logits,
                                  const int32_t* targets, const float* weights, int64_t N,
                                  int64_t V) {
  cross_entropy_forward(loss, lse, FloatPtr(logits), targets, weights, N, V);
}
inline void cross_entropy_backward(float* d_logits, const float* logits, const float* lse,
                                   const int32_t* targets, const float* weights, float d_loss,
                                   int64_t N, int64_t V) {
  cross_entropy_backward(FloatPtr(d_logits), FloatPtr(logits), lse, targets, weights, d_loss, N, V);
}

}  // namespace maxctx::kernels::cpu

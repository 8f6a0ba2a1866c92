// Fast masked softmax cross-entropy (Highway SIMD with a vectorized exp, OpenMP over rows).
//
// Same signatures and semantics as kernels/ref/cross_entropy.h: loss[i] = w[i]·(lse[i] −
// logits[i, target]); rows with weight 0 get loss 0 and d_logits 0 and their targets are not
// read; d_logits = d_loss·w·(softmax − onehot) is overwritten and may be logits (in place, which
// halves the memory of the largest activation). Targets are checked before any thread starts.
#pragma once

#include <cstdint>

namespace maxctx::kernels::cpu {

void cross_entropy_forward(float* loss,             // (N) weighted per-row loss
                           float* lse,              // (N) log-sum-exp of the row, saved
                           const float* logits,     // (N, V)
                           const int32_t* targets,  // (N) read only where weights != 0
                           const float* weights,    // (N) 0 masks the row
                           int64_t N, int64_t V);

void cross_entropy_backward(float* d_logits,         // (N, V) overwritten; may be logits
                            const float* logits,     // (N, V)
                            const float* lse,        // (N) from cross_entropy_forward
                            const int32_t* targets,  // (N)
                            const float* weights,    // (N)
                            float d_loss,            // dL/dloss_i, the same for every row
                            int64_t N, int64_t V);

}  // namespace maxctx::kernels::cpu

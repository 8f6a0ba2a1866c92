// The readout ops of the cpu backend (kernel_ops.inc's "readouts"): the step's few scalars and
// greedy decoding's tokens, written where the caller's arrays are. Plain loops in element order:
// these are the definitions the device backends' fixed orders are compared against, and the
// gradient norm's bits (tests/golden) are those of this order.
#pragma once

#include <cstdint>

#include "maxctx/kernels/cpu/float_ptr.h"

namespace maxctx::kernels::cpu {

double sum_in_order(const float* x,  // (n)
                    int64_t n);

double sum_of_squares_in_order(FloatPtr x,  // (n)
                               int64_t n);
// The fp32 case, with the reference's signature (ref::sum_of_squares).
inline double sum_of_squares_in_order(const float* x, int64_t n) {
  return sum_of_squares_in_order(FloatPtr(x), n);
}

// Rows i < n with weights[i] != 0 whose first arg max over logits' row (vocab) is targets[i].
int64_t count_arg_max_hits(const float* logits,     // (n, vocab)
                           const int32_t* targets,  // (n)
                           const float* weights,    // (n)
                           int64_t n, int64_t vocab);

void arg_max_rows(int32_t* ids,         // (n) out
                  const float* logits,  // (n, vocab)
                  int64_t n, int64_t vocab);

// x = (x / divisor) · multiplier, each step rounded in fp32 (x's dtype at the end).
void scale_by_ratio(FloatPtr x,  // (n)
                    int64_t n, float divisor, float multiplier);

}  // namespace maxctx::kernels::cpu

// One token row through a linear layer: out = weight · in, weight (out_dim, in_dim) row-major,
// the nn.Linear layout of matmul_forward at N = 1 (kernels/ref/matmul.h is its oracle, and
// matmul_forward sends N = 1 here).
//
// Why a kernel of its own: a decode step is memory-bound, one pass over every weight. OpenBLAS
// 0.3.21's sgemv streams about 33 GB/s from DRAM on one core of this machine; reading four rows
// at a time while prefetching the next four reaches about 38, what a plain sequential read gets
// (the maxctx-100m projection shapes, one core, measured side by side).
#pragma once

#include <cstdint>

#include "maxctx/core/dtype.h"

namespace maxctx::kernels::cpu {

void gemv_forward(float* out,           // (out_dim)
                  const float* in,      // (in_dim)
                  const float* weight,  // (out_dim, in_dim)
                  int64_t in_dim, int64_t out_dim);

// The same with a bf16 weight, widened exactly as it streams: half the bytes of the fp32 weight,
// so a memory-bound decode step runs nearly twice as fast. The sums are the fp32 FMAs above, in
// the same order, of the widened weights (bit-identical to gemv_forward on the widened matrix).
void gemv_forward_bf16(float* out,          // (out_dim)
                       const float* in,     // (in_dim)
                       const bf16* weight,  // (out_dim, in_dim)
                       int64_t in_dim, int64_t out_dim);

}  // namespace maxctx::kernels::cpu

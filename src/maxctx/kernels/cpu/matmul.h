// Fast matmul in the nn.Linear layout: out = in · weightᵀ, weight (out_dim, in_dim), through the
// project's SGEMM (kernels/cpu/sgemm.h: bit-identical for any thread count).
//
// Same signatures and semantics as kernels/ref/matmul.h: d_weight accumulates (+=); d_in is
// overwritten, or accumulated by matmul_backward_accumulate_input; d_in == nullptr skips it.
#pragma once

#include <cstdint>

namespace maxctx::kernels::cpu {

void matmul_forward(float* out,           // (N, out_dim)
                    const float* in,      // (N, in_dim)
                    const float* weight,  // (out_dim, in_dim)
                    int64_t N, int64_t in_dim, int64_t out_dim);

void matmul_backward(float* d_in,          // (N, in_dim) overwritten, or nullptr to skip
                     float* d_weight,      // (out_dim, in_dim) accumulated
                     const float* d_out,   // (N, out_dim)
                     const float* in,      // (N, in_dim)
                     const float* weight,  // (out_dim, in_dim)
                     int64_t N, int64_t in_dim, int64_t out_dim);

void matmul_backward_accumulate_input(float* d_in,          // (N, in_dim) accumulated, or nullptr
                                      float* d_weight,      // (out_dim, in_dim) accumulated
                                      const float* d_out,   // (N, out_dim)
                                      const float* in,      // (N, in_dim)
                                      const float* weight,  // (out_dim, in_dim)
                                      int64_t N, int64_t in_dim, int64_t out_dim);

}  // namespace maxctx::kernels::cpu

// Fast matmul in the nn.Linear layout: out = in · weightᵀ, weight (out_dim, in_dim), through the
// project's SGEMM (kernels/cpu/sgemm.h: bit-identical for any thread count).
//
// Same signatures and semantics as kernels/ref/matmul.h: d_weight accumulates (+=); d_in is
// overwritten, or accumulated by matmul_backward_accumulate_input; d_in == nullptr skips it.
//
// The mixed-precision overloads (ConstFloats/Floats: f32 or bf16 arrays) implement kernels.h's
// contract: `in`'s dtype decides. in bf16: the weight and d_out are rounded to bf16 and the
// products run on gemm_bf16 (fp32 accumulation; gemm_bf16.h gives the exact sequence), except a
// single row against a bf16 weight, which runs gemv_forward_bf16 (fp32 FMAs of the bf16 values:
// the same products, summed in another order). in f32: the fp32 functions above, bf16 operands
// widened exactly into scratch (a bf16 weight for one row streams directly: gemv_forward_bf16).
// Outputs of dtype bf16 are rounded once from the fp32 result; d_weight is always f32.
#pragma once

#include <cstdint>

#include "maxctx/kernels/cpu/gemm_bf16.h"

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

void matmul_forward(Floats out,          // (N, out_dim)
                    ConstFloats in,      // (N, in_dim)
                    ConstFloats weight,  // (out_dim, in_dim)
                    int64_t N, int64_t in_dim, int64_t out_dim);
void matmul_backward(Floats d_in,         // (N, in_dim) overwritten; data nullptr to skip
                     float* d_weight,     // (out_dim, in_dim) accumulated
                     ConstFloats d_out,   // (N, out_dim)
                     ConstFloats in,      // (N, in_dim)
                     ConstFloats weight,  // (out_dim, in_dim)
                     int64_t N, int64_t in_dim, int64_t out_dim);
void matmul_backward_accumulate_input(Floats d_in,  // (N, in_dim) accumulated, or data nullptr
                                      float* d_weight, ConstFloats d_out, ConstFloats in,
                                      ConstFloats weight, int64_t N, int64_t in_dim,
                                      int64_t out_dim);

}  // namespace maxctx::kernels::cpu

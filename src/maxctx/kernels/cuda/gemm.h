// The dense layers' GEMMs through cuBLASLt (kernels.h's matmul_*), with the in-dtype rule of
// kernels.h: `in` bf16 → the weight (and d_out in backward) are rounded to bf16 and multiplied
// as bf16 with fp32 accumulation; `in` f32 → fp32 products (a bf16 weight or d_out widens
// exactly). CUBLAS_COMPUTE_32F, never TF32. Plain C++ (no CUDA types).
#pragma once

#include <cstdint>

#include "maxctx/kernels/cuda/device_float.h"

namespace maxctx::kernels::cuda {

// out (N, out_dim) = in (N, in_dim) · weightᵀ, weight (out_dim, in_dim).
void matmul_forward(DeviceFloats out, ConstDeviceFloats in, ConstDeviceFloats weight, int64_t N,
                    int64_t in_dim, int64_t out_dim);

// d_weight (out_dim, in_dim) f32 += d_outᵀ · in; d_in (N, in_dim) = (or += when accumulate)
// d_out · weight, skipped when d_in.data is null.
void matmul_backward(DeviceFloats d_in, bool accumulate, float* d_weight, ConstDeviceFloats d_out,
                     ConstDeviceFloats in, ConstDeviceFloats weight, int64_t N, int64_t in_dim,
                     int64_t out_dim);

}  // namespace maxctx::kernels::cuda

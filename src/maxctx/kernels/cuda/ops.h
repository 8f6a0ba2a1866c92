// The CUDA backend's raw kernels (one .cu file per family, as kernels/cpu/ has them), on device
// pointers, launched on the legacy default stream (stream 0: the NCCL communicator orders its own
// stream against it with events, so the backend creates no other stream). Arithmetic as the
// reference (kernels/ref/) states it, in fp32 with each output rounded once to its dtype. The
// backend (cuda_kernels.cu) checks the views and calls these; nothing here reads the device back
// (kernel_ops.inc's readouts write their results to device memory). No .cu file includes
// core/check.h (nvcc cannot compile fmt): the host-side checks live in the .cpp files beside them.
#pragma once

#include <cstdint>

#include "maxctx/core/dtype.h"
#include "maxctx/kernels/cuda/device_float.h"
#include "maxctx/kernels/types.h"

namespace maxctx::kernels::cuda {

// elementwise.cu
void zero_bytes(void* memory, size_t bytes);
void copy_bytes(void* dst, const void* src, size_t bytes);  // device to device, not overlapping
void add(DeviceFloats out, ConstDeviceFloats a, ConstDeviceFloats b, int64_t n);
void add_inplace(DeviceFloats acc, ConstDeviceFloats x, int64_t n);
void scale(DeviceFloats out, ConstDeviceFloats in, float alpha, int64_t n);
void convert(DeviceFloats out, ConstDeviceFloats in, int64_t n);  // f32 <-> bf16, RNE
// out[0] (device) = Σ x, Σ x² in double: per-thread sums in a fixed grid, then fixed-order
// trees (deterministic; the cpu adds in element order, so the two agree to rounding).
void sum_in_order(double* out, ConstDeviceFloats x, int64_t n);
void sum_of_squares(double* out, ConstDeviceFloats x, int64_t n);
// x = (x / divisor) · multiplier, each step rounded in fp32.
void scale_by_ratio(DeviceFloats x, int64_t n, float divisor, float multiplier);

// readouts.cu: arg max rows (the first index of the largest value, as core/arg_max.h).
// out[0] (device) = the rows with weights != 0 whose arg max is their target (exact).
void count_arg_max_hits(double* out, ConstDeviceFloats logits, const int32_t* targets,
                        const float* weights, int64_t N, int64_t V);
void arg_max_rows(int32_t* ids, ConstDeviceFloats logits, int64_t N, int64_t V);

// adamw.cu (optax's rule, as kernels/cpu/adamw.cpp: moments and params each rounded once)
// kernels.h's AdamWStep, field for field (kernels.h includes core/check.h, which no .cu file may).
struct AdamWConstants {
  float b1, b2, one_minus_b1, one_minus_b2;
  float eps, eps_root, weight_decay, learning_rate;
  float correction1, correction2;
};
void adamw_update(DeviceFloats params, ConstDeviceFloats grads, DeviceFloats mu, DeviceFloats nu,
                  int64_t n, const AdamWConstants& step);

// rmsnorm.cu
void rmsnorm_forward(DeviceFloats out, float* rstd, ConstDeviceFloats in, ConstDeviceFloats weight,
                     int64_t N, int64_t D, float eps);
void rmsnorm_backward(DeviceFloats d_in, float* d_weight, ConstDeviceFloats d_out,
                      ConstDeviceFloats in, ConstDeviceFloats weight, const float* rstd, int64_t N,
                      int64_t D);

// rope.cu
void rope_cos_sin(float* cos, float* sin, const int32_t* positions, int64_t N, int64_t head_dim,
                  const RopeParams& params);
// sign +1 rotates by +angle (forward), −1 by −angle (backward); out may be in.
void rope_rotate(DeviceFloats out, ConstDeviceFloats in, const float* cos, const float* sin,
                 int64_t N, int64_t heads, int64_t head_dim, float sign);

// swiglu.cu
void swiglu_forward(DeviceFloats out, ConstDeviceFloats gate, ConstDeviceFloats up, int64_t n);
void swiglu_backward(DeviceFloats d_gate, DeviceFloats d_up, ConstDeviceFloats d_out,
                     ConstDeviceFloats gate, ConstDeviceFloats up, int64_t n);

// cross_entropy.cu. A weighted row whose target is outside [0, V) gets a NaN loss and NaN
// d_logits (the host checks targets before their upload, as for embedding ids).
void cross_entropy_forward(float* loss, float* lse, ConstDeviceFloats logits,
                           const int32_t* targets, const float* weights, int64_t N, int64_t V);
void cross_entropy_backward(DeviceFloats d_logits, ConstDeviceFloats logits, const float* lse,
                            const int32_t* targets, const float* weights, float d_loss, int64_t N,
                            int64_t V);

// embedding.cu. Ids are not checked here: that would read the device back on every call. The host
// checks them where it holds them (the batch before its upload); an id outside [0, V) gives a
// NaN row forward and is skipped backward, so it shows in the loss instead of reading out of
// bounds.
void embedding_forward(DeviceFloats out, const int32_t* tokens, ConstDeviceFloats table, int64_t N,
                       int64_t D, int64_t V);
// Deterministic: rows sorted by token id (a stable radix sort keeps row order within a token),
// each token's rows summed into its table row in that order, as the reference does.
void embedding_backward(float* d_table, ConstDeviceFloats d_out, const int32_t* tokens, int64_t N,
                        int64_t D, int64_t V);

// attention_reference.cu: the plain device attention's kernels (attention_reference.h has the
// op-table entry points, their checks and the precision rules).
struct AttentionDims {
  int64_t batch, seq_q, seq_k, heads_q, heads_kv, head_dim, group;
  float scale;
  int32_t window;
};
struct AttentionMasks {
  const int32_t *q_pos, *q_seg, *k_pos, *k_seg;
};
// A K or V operand: f32, bf16, or int8 codes with one f32 scale per cache row (b·Sk + j).
struct KvRows {
  const void* data = nullptr;
  DType dtype = DType::kF32;
  const float* row_scale = nullptr;
};
inline constexpr int64_t kMaxHeadDim = 256;  // each lane holds head_dim / 32 elements
void attention_forward_rows(DeviceFloats out, float* lse, ConstDeviceFloats q, KvRows k, KvRows v,
                            const AttentionMasks& masks, const AttentionDims& dims,
                            bool bf16_products);
void attention_backward_rows(float* dq, float* dk, float* dv, ConstDeviceFloats d_out,
                             ConstDeviceFloats out, const float* lse, ConstDeviceFloats q, KvRows k,
                             KvRows v, const AttentionMasks& masks, const AttentionDims& dims,
                             bool bf16_products);
// The decode step's forward (Kernels::single_query_attention): attention_forward_rows with fp32
// products, split over key blocks for a long cache (flash-decoding, kernels/decode_split.h): the
// blocks' partials in scratch, merged in block order by the LSE merge.
void single_query_attention_rows(DeviceFloats out, float* lse, ConstDeviceFloats q, KvRows k,
                                 KvRows v, const AttentionMasks& masks, const AttentionDims& dims);
// Visible (query row, key row) pairs over the batch (exact integer sum).
int64_t count_visible_pairs(const AttentionMasks& masks, const AttentionDims& dims);
void attention_merge(float* out, float* lse, const float* out_a, const float* lse_a,
                     const float* out_b, const float* lse_b, int64_t batch, int64_t seq_q,
                     int64_t heads_q, int64_t head_dim);

}  // namespace maxctx::kernels::cuda

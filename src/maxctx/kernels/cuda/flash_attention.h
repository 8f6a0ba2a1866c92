// Flash attention on CUDA, forward and backward: the op table's attention_forward and
// attention_backward (kernels/kernels.h) on device memory, with the same mask, layout and
// precision contract as kernels/ref/attention.h and the cpu flash kernel:
//   q, out (B, Sq, Hq, D)   k, v (B, Sk, Hkv, D)   lse (B, Hq, Sq) f32   positions (B, S) int32
//   q, k, v f32 or bf16 (one dtype); out, d_out f32 or bf16; dq, dk, dv f32, accumulated (+=).
// Tiles are classified skip / unmasked / masked from per-block position and segment ranges
// (kernels/mask.h, computed on the device by a pre-pass), and the query heads of one kv group
// share a tile. bf16: S = q·kᵀ from bf16 products with fp32 sums (mma.sync m16n8k16), softmax in
// fp32, P rounded to bf16 for P·v; the backward rounds d_out, P and dS to bf16 for its products.
// f32 stays fp32 throughout (FFMA, never TF32). The backward is deterministic: no atomics, dk/dv
// by one kernel over key blocks and dq by another over query blocks. head_dim 64 or 128.
//
// A plain C++ header: every pointer in the views and the position arrays is device memory, the
// stream is a cudaStream_t passed as void* (nullptr: the legacy default stream). The calls are
// asynchronous on that stream, except that stats (when not null) are counted on the host from the
// block ranges, which waits for the pre-pass. Errors (a bad shape or dtype, a CUDA failure) are
// one maxctx::Error line.
#pragma once

#include <cstdint>

#include "maxctx/core/tensor.h"
#include "maxctx/kernels/types.h"

namespace maxctx::kernels::cuda {

void flash_attention_forward(TensorView out, TensorView lse, TensorView q, TensorView k,
                             TensorView v, const int32_t* q_pos, const int32_t* q_seg,
                             const int32_t* k_pos, const int32_t* k_seg,
                             const AttentionParams& params, AttentionStats* stats, void* stream);

void flash_attention_backward(TensorView dq, TensorView dk, TensorView dv, TensorView d_out,
                              TensorView out, TensorView lse, TensorView q, TensorView k,
                              TensorView v, const int32_t* q_pos, const int32_t* q_seg,
                              const int32_t* k_pos, const int32_t* k_seg,
                              const AttentionParams& params, AttentionStats* stats, void* stream);

}  // namespace maxctx::kernels::cuda

// The plain device attention: one warp per query row (forward, the dq pass) or per key row (the
// dk/dv pass), every key tested against the mask of kernels/ref/attention.h (positions,
// segments, causal, sliding window), a two-pass softmax over the visible keys. It is the
// device-side oracle the flash kernels (flash_attention.cu) are tested against, so it stays this
// plain; its arguments are Kernels::attention_forward/backward's.
//
// Precision as kernels.h states it. q, k, v f32: fp32 throughout. q, k, v bf16: S = scale·(q·kᵀ)
// from exact bf16 products summed in fp32, the softmax in fp32, P rounded to bf16 for P·v;
// backward rounds d_out, P and dS to bf16 for its products. The softmax here normalizes by the
// row's global max (the cpu kernel's online softmax by a running max), so bf16 results agree
// with the cpu backend within bf16 rounding, not bit for bit.
// Backward accumulates (+=) into dq, dk, dv without atomics: each row is written by one warp.
// Head dims up to ops.h's kMaxHeadDim (256: each lane holds head_dim / 32 elements in registers).
// The kernels are in attention_reference.cu; these entry points (host code) check the views.
#pragma once

#include "maxctx/kernels/kernels.h"

namespace maxctx::kernels::cuda {

void attention_forward_reference(TensorView out, TensorView lse, TensorView q, TensorView k,
                                 TensorView v, const int32_t* q_pos, const int32_t* q_seg,
                                 const int32_t* k_pos, const int32_t* k_seg,
                                 const AttentionParams& params, AttentionStats* stats);

void attention_backward_reference(TensorView dq, TensorView dk, TensorView dv, TensorView d_out,
                                  TensorView out, TensorView lse, TensorView q, TensorView k,
                                  TensorView v, const int32_t* q_pos, const int32_t* q_seg,
                                  const int32_t* k_pos, const int32_t* k_seg,
                                  const AttentionParams& params, AttentionStats* stats);

// The decode step (Kernels::single_query_attention): the forward above with fp32 products on the
// cache widened (f32 or bf16 k, v) or dequantized (int8 codes · the row's scale; k_scale and
// v_scale (B, Sk) f32, empty views for a float cache). A long cache is split into key blocks
// whose partials the LSE merge joins (flash-decoding, kernels/decode_split.h), so that its few
// query rows still fill the GPU; the result differs from the unsplit pass by fp32 rounding only.
void single_query_attention_reference(TensorView out, TensorView lse, TensorView q, TensorView k,
                                      TensorView k_scale, TensorView v, TensorView v_scale,
                                      const int32_t* q_pos, const int32_t* q_seg,
                                      const int32_t* k_pos, const int32_t* k_seg,
                                      const AttentionParams& params);

}  // namespace maxctx::kernels::cuda

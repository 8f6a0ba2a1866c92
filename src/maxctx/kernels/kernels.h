// The op table: every kernel the model, parallel/, infer/ and train/ call, on tensor views.
//
// One Kernels object is one backend (kernels/<backend>/ implements it; kernels/backends.cpp
// lists them). Code above kernels/ is handed a `const Kernels&` and never names a backend, a
// device or a precision: each op reads the dtypes and device off its views and dispatches, and a
// backend refuses (MAXCTX_CHECK) a dtype or device it does not implement rather than converting
// silently. Memory a backend's ops touch is allocated through it (`empty`, `allocator`).
//
// Shapes: every op documents its views' shapes with the legend of kernels/README.md (N token
// rows, E/in/out feature dims, H heads, D head_dim, V vocab). A view may carry any shape with the
// stated element count unless the op says it reads a dim from it (matmul reads (out, in) from
// the weight, rmsnorm D from its weight). Index arrays (token ids, targets, positions, segment
// ids) are int32 arrays in the backend's memory, passed as pointers with the count given by the
// views beside them. Conventions of the reference hold for every backend: parameter gradients
// accumulate, activation gradients are overwritten unless the op says `accumulate`.
//
// Precision (MaxText's mixed precision; the dtype of every view is the caller's choice, never a
// flag). "Float" views are f32 or bf16, each independently, unless an op says otherwise; int8
// views only where an op names them. An op widens bf16 inputs to fp32 (exact), computes in fp32
// and rounds each output once to its view's dtype (round to nearest even). Statistics are always
// f32: rstd, lse, loss and loss weights, rope cos/sin.
// Products run in the *activation's* dtype, so that `dtype=bfloat16` means bf16 matmul inputs:
//   - matmul_*: `in` decides. in bf16: weight (and d_out in backward) are rounded to bf16 and
//     multiplied with fp32 accumulation in AMX's sequence (cpu/gemm_bf16.h: per 32-element
//     chunk of K, even and odd products summed in two FTZ fp32 chains, then added to the
//     accumulator; a CPU without AMX runs the same sequence of fp32 adds, bit for bit). in f32:
//     fp32 products (a bf16 weight widens exactly). d_weight is f32 (gradients are reduced in
//     fp32); d_in and out are any float.
//   - attention_*: q, k, v share one dtype, which decides; bf16: S = q·kᵀ from bf16 products, the
//     softmax in fp32, P rounded to bf16 for P·v; backward likewise rounds d_out, P and dS to
//     bf16 for its products. lse f32; out and d_out any float; dq, dk, dv f32 (accumulated).
//   - single_query_attention(_int8): q, out any float; k, v f32 or bf16 (the cache's dtype).
// A dtype an op does not list is a MAXCTX_CHECK failure naming the op and the dtypes, never a
// silent conversion.
#pragma once

#include <cstdint>

#include "maxctx/core/device.h"
#include "maxctx/core/tensor.h"
#include "maxctx/kernels/types.h"

namespace maxctx::kernels {

// AdamW's constants for one update (optax's adamw; train/optimizer.h documents the rule).
// Each constant is rounded to fp32 once, as JAX does with optax's Python-float hyperparameters
// (so 1 − b is rounded from double, not computed in fp32).
struct AdamWStep {
  float b1, b2, one_minus_b1, one_minus_b2;
  float eps, eps_root, weight_decay, learning_rate;
  float correction1, correction2;  // 1 − b1^t, 1 − b2^t
};

// Views of attention's five tensors over raw arrays, shaped by the params: out, q (B, Sq, Hq, D),
// lse (B, Hq, Sq), k, v (B, Sk, Hkv, D). For callers that hold the arrays as pointers (the
// attention plans pass chunks of their buffers around).
struct AttentionViews {
  AttentionViews(const AttentionParams& p, const float* out_data, const float* lse_data,
                 const float* q_data, const float* k_data, const float* v_data)
      : out(TensorView::of(out_data, p.batch * p.seq_q * p.heads_q * p.head_dim)),
        lse(TensorView::of(lse_data, p.batch * p.heads_q * p.seq_q)),
        q(TensorView::of(q_data, p.batch * p.seq_q * p.heads_q * p.head_dim)),
        k(TensorView::of(k_data, p.batch * p.seq_k * p.heads_kv * p.head_dim)),
        v(TensorView::of(v_data, p.batch * p.seq_k * p.heads_kv * p.head_dim)) {}
  TensorView out, lse, q, k, v;
};

class Kernels {
 public:
  virtual ~Kernels() = default;

  virtual const char* name() const = 0;  // "cpu"
  virtual Device device() const = 0;
  virtual const Allocator& allocator() const = 0;
  // A zeroed tensor in this backend's memory.
  Tensor empty(Shape shape, DType dtype = DType::kF32) const {
    return Tensor(shape, dtype, allocator());
  }
  // `tensor` with at least `numel` elements of `dtype` (reallocated, zeroed, when smaller or of
  // another dtype; kept, contents and all, otherwise): scratch that grows to its largest use.
  void reserve(Tensor& tensor, int64_t numel, DType dtype = DType::kF32) const;
  // A tensor in this backend's memory with no page committed (Allocator::allocate_reserved):
  // commit a range before using it.
  Tensor empty_reserved(Shape shape, DType dtype = DType::kF32) const {
    return Tensor(shape, dtype, allocator(), Residency::kReserved);
  }
  // `view`'s pages hold memory (zero where they were decommitted), or are handed back to the
  // device, its contents gone (Allocator::commit, decommit); the view stays valid.
  void commit(TensorView view) const { allocator().commit(view.raw(), view.bytes()); }
  void decommit(TensorView view) const { allocator().decommit(view.raw(), view.bytes()); }

  // Bytes between host memory and this backend's (Allocator::copy_to_host says when).
  void copy_to_host(void* host, const void* backend_memory, size_t bytes) const {
    allocator().copy_to_host(host, backend_memory, bytes);
  }
  void copy_from_host(void* backend_memory, const void* host, size_t bytes) const {
    allocator().copy_from_host(backend_memory, host, bytes);
  }

  // ---- dense layers ----
  // out (N, out) = in (N, in) · weightᵀ, weight (out, in) as nn.Linear stores it.
  virtual void matmul_forward(TensorView out, TensorView in, TensorView weight) const = 0;
  // d_in (N, in) = d_out · weight (skipped when d_in is empty); d_weight (out, in) += d_outᵀ · in.
  virtual void matmul_backward(TensorView d_in, TensorView d_weight, TensorView d_out,
                               TensorView in, TensorView weight) const = 0;
  // As matmul_backward, but d_in += d_out · weight (the residual stream sums several branches).
  virtual void matmul_backward_accumulate_input(TensorView d_in, TensorView d_weight,
                                                TensorView d_out, TensorView in,
                                                TensorView weight) const = 0;
  // out (N, E) = table[tokens]; table (V, E).
  virtual void embedding_forward(TensorView out, const int32_t* tokens, TensorView table) const = 0;
  // d_table (V, E) += scatter of d_out (N, E) by tokens.
  virtual void embedding_backward(TensorView d_table, TensorView d_out,
                                  const int32_t* tokens) const = 0;
  // out (N, D) = in · rstd · weight, rstd (N) = 1/sqrt(mean(in²) + eps); weight (D).
  virtual void rmsnorm_forward(TensorView out, TensorView rstd, TensorView in, TensorView weight,
                               float eps) const = 0;
  virtual void rmsnorm_backward(TensorView d_in, TensorView d_weight, TensorView d_out,
                                TensorView in, TensorView weight, TensorView rstd) const = 0;
  // cos, sin (N, D/2) of each token's position (angles in double, rounded once).
  virtual void rope_cos_sin(TensorView cos, TensorView sin, const int32_t* positions,
                            const RopeParams& params) const = 0;
  // out, in (N, heads, D) rotated by +angle (forward) or −angle (backward); may run in place.
  virtual void rope_forward(TensorView out, TensorView in, TensorView cos,
                            TensorView sin) const = 0;
  virtual void rope_backward(TensorView d_in, TensorView d_out, TensorView cos,
                             TensorView sin) const = 0;
  // out (N, F) = silu(gate) · up.
  virtual void swiglu_forward(TensorView out, TensorView gate, TensorView up) const = 0;
  virtual void swiglu_backward(TensorView d_gate, TensorView d_up, TensorView d_out,
                               TensorView gate, TensorView up) const = 0;
  // loss (N) = weight · xent of logits (N, V) against targets; lse (N) saved for backward.
  virtual void cross_entropy_forward(TensorView loss, TensorView lse, TensorView logits,
                                     const int32_t* targets, TensorView weights) const = 0;
  // d_logits (N, V) (may be logits) for dL/dloss_i = d_loss on every row.
  virtual void cross_entropy_backward(TensorView d_logits, TensorView logits, TensorView lse,
                                      const int32_t* targets, TensorView weights,
                                      float d_loss) const = 0;

  // ---- attention (layout and mask: kernels/ref/attention.h; shapes from params) ----
  virtual void attention_forward(TensorView out, TensorView lse, TensorView q, TensorView k,
                                 TensorView v, const int32_t* q_pos, const int32_t* q_seg,
                                 const int32_t* k_pos, const int32_t* k_seg,
                                 const AttentionParams& params, AttentionStats* stats) const = 0;
  // Accumulates (+=) into dq, dk, dv.
  virtual void attention_backward(TensorView dq, TensorView dk, TensorView dv, TensorView d_out,
                                  TensorView out, TensorView lse, TensorView q, TensorView k,
                                  TensorView v, const int32_t* q_pos, const int32_t* q_seg,
                                  const int32_t* k_pos, const int32_t* k_seg,
                                  const AttentionParams& params, AttentionStats* stats) const = 0;
  // out, lse (B, Sq, Hq, D), (B, Hq, Sq) = the log-sum-exp merge of two partials over disjoint
  // key sets; out/lse may alias out_a/lse_a.
  virtual void attention_merge(TensorView out, TensorView lse, TensorView out_a, TensorView lse_a,
                               TensorView out_b, TensorView lse_b, int64_t batch, int64_t seq_q,
                               int64_t heads_q, int64_t head_dim) const = 0;
  // One query row per batch element against a KV cache (decode); k, v fp32 (B, Sk, Hkv, D).
  virtual void single_query_attention(TensorView out, TensorView lse, TensorView q, TensorView k,
                                      TensorView v, const int32_t* q_pos, const int32_t* q_seg,
                                      const int32_t* k_pos, const int32_t* k_seg,
                                      const AttentionParams& params) const = 0;
  // The same on an int8 cache: codes (B, Sk, Hkv, D) with one scale per cache row (B, Sk).
  virtual void single_query_attention_int8(TensorView out, TensorView lse, TensorView q,
                                           TensorView k_codes, TensorView k_scale,
                                           TensorView v_codes, TensorView v_scale,
                                           const int32_t* q_pos, const int32_t* q_seg,
                                           const int32_t* k_pos, const int32_t* k_seg,
                                           const AttentionParams& params) const = 0;

  // ---- int8 (the rule: kernels/ref/int8.h) ----
  // A weight (out, in) quantized per output row and packed for int8_matmul_forward.
  virtual Int8Weights int8_pack_weights(TensorView weight) const = 0;
  // The same from codes (out, in) int8 and scale (out) f32 already quantized by that rule (a
  // quantized checkpoint): packed without re-quantizing.
  virtual Int8Weights int8_pack_codes(TensorView codes, TensorView scale) const = 0;
  // in (N, in_dim) quantized per row into `rows` (reused across calls).
  virtual void int8_quantize_rows(Int8Rows& rows, TensorView in) const = 0;
  // out (N, out) = rows · wᵀ, exact int32 sums scaled once.
  virtual void int8_matmul_forward(TensorView out, const Int8Rows& rows,
                                   const Int8Weights& weight) const = 0;
  // codes (rows, cols) int8 and scale (rows) of x (rows, cols) with `levels` (127 or 127.5).
  virtual void quantize_rows_int8(TensorView codes, TensorView scale, TensorView x,
                                  float levels) const = 0;
  virtual void dequantize_rows_int8(TensorView x, TensorView codes, TensorView scale) const = 0;

  // ---- elementwise, copies, optimizer ----
  virtual void add(TensorView out, TensorView a, TensorView b) const = 0;  // out may be a or b
  virtual void add_inplace(TensorView acc, TensorView x) const = 0;
  virtual void scale(TensorView out, TensorView in, float alpha) const = 0;
  virtual void fill_zero(TensorView x) const = 0;
  virtual double sum_of_squares(TensorView x) const = 0;  // Σ x² in double
  // dst = src, converting between dtypes (f32 ↔ bf16 rounds to nearest even); same numel.
  virtual void copy(TensorView dst, TensorView src) const = 0;
  // One AdamW update of params with the moments mu, nu (same numel as grads); per element, so
  // any range of the parameters (an fsdp shard) updates bit for bit like the whole.
  virtual void adamw_update(TensorView params, TensorView grads, TensorView mu, TensorView nu,
                            const AdamWStep& step) const = 0;
};

// The backend for a device: Device::kCpu is always there; another is an error naming the
// devices this build has.
const Kernels& backend(Device device);

}  // namespace maxctx::kernels

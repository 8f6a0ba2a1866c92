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
#include <optional>

#include "maxctx/core/device.h"
#include "maxctx/core/stream.h"
#include "maxctx/core/tensor.h"
#include "maxctx/kernels/event.h"
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

  // Bytes between host memory and this backend's (Allocator::copy_to_host says when). A
  // device backend counts them (transfer_counts); the host's staging of collectives goes to the
  // allocator directly and is not counted here (mesh/device_collectives.h).
  virtual void copy_to_host(void* host, const void* backend_memory, size_t bytes) const {
    allocator().copy_to_host(host, backend_memory, bytes);
  }
  virtual void copy_from_host(void* backend_memory, const void* host, size_t bytes) const {
    allocator().copy_from_host(backend_memory, host, bytes);
  }
  // What the host has read back from this backend and waited for since the process began,
  // where the backend keeps count (the device backends; the cpu's memory is the host's: nullopt).
  // A training step reads back once per micro-batch and once per step (model/llama.h,
  // parallel/sharded_parameters.h); the trainer reports the step's counts as metrics.
  virtual std::optional<TransferCounts> transfer_counts() const { return std::nullopt; }

  // ---- time (ggml's ggml_backend_i) ----
  // A backend's ops and copies run in the order they are issued, on its stream, and the host may
  // run ahead of them. The defaults are a backend's whose ops finish before they return (cpu, the
  // emulated GPU): nothing to wait for, results bit for bit those of the synchronous calls.
  //
  // Returns once everything issued to this backend so far has finished.
  virtual void synchronize() const {}
  // An event after everything issued to this backend so far.
  virtual Event record_event() const { return Event(); }
  // The stream its ops are issued to, which the communicators' verbs on its memory run on
  // (mesh/communicator.h): the host's here, the device's queue on a device backend.
  virtual Stream stream() const { return Stream(); }
  // backend_memory = host's bytes, ordered before the ops issued after it. `host` is read before
  // the call returns (a device backend stages it in pinned memory): it may be reused at once.
  virtual void copy_from_host_async(void* backend_memory, const void* host, size_t bytes) const {
    copy_from_host(backend_memory, host, bytes);
  }
  // host = backend_memory's bytes once the work issued before has finished: `host` holds them
  // after the returned event's synchronize(), not before.
  virtual Event copy_to_host_async(void* host, const void* backend_memory, size_t bytes) const {
    copy_to_host(host, backend_memory, bytes);
    return Event();
  }
  // copy_to_host_async of an activation kept in host memory for the backward (host offload,
  // model/remat.h): the host never reads it, it comes back with copy_from_host_async after a
  // synchronize(); counted as an offload, not a readback.
  virtual void offload_to_host_async(void* host, const void* backend_memory, size_t bytes) const {
    copy_to_host_async(host, backend_memory, bytes);
  }

  // The ops, one virtual each, generated from the op list (kernel_ops.inc, with their shapes).
#define MAXCTX_KERNEL_OP(result, op, params, args) virtual result op params const = 0;
#include "maxctx/kernels/kernel_ops.inc"
#undef MAXCTX_KERNEL_OP
};

// The backend for a device: Device::kCpu is always there; another is an error naming the
// devices this build has.
const Kernels& backend(Device device);

}  // namespace maxctx::kernels

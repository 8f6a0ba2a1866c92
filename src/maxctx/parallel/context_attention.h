// Context-parallel attention over the `context` axis (DESIGN.md §5): each rank holds S/cp tokens
// of every sequence (after the dual chunk swap, when balancing is on) and its queries attend to
// the keys of all ranks.
//
//  - AllGatherContextAttention (context_parallel_strategy=all_gather, MaxText's default): K, V
//    (KV heads only; GQA is never expanded), positions and segment ids are all-gathered; the
//    local queries attend to the whole sequence through the position-masked kernel, whose tile
//    skipping turns the dual chunk swap into equal work. Backward recomputes the gather (K/V are
//    small next to the attention FLOPs) and reduce-scatters dK, dV to their owners.
//  - RingContextAttention (=ring): K/V chunks travel around the ring with isend/irecv posted
//    before the current chunk is computed; partial (out, lse) are merged by log-sum-exp.
//    Backward passes each chunk with its dK/dV accumulators around the ring and home.
//
// Masks come only from positions and segment ids, so causal, packed documents and sliding
// windows hold under either strategy with or without balancing. Both match LocalAttention on
// the unsharded sequence (tests/parallel).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "maxctx/kernels/host_transfer.h"
#include "maxctx/mesh/communicator.h"
#include "maxctx/mesh/traffic.h"
#include "maxctx/parallel/model_plan.h"

namespace maxctx::parallel {

// This rank's attention operands as a context-parallel plan receives them, for what `maxctx
// plan` reads off the plans below: the traffic of one forward or backward call (on the context
// axis, named `axis`) and the staging bytes the plan holds once it has run both.
struct AttentionOperands {
  int64_t batch = 0, seq = 0;                       // this rank's rows, tokens per row
  int64_t heads_q = 0, heads_kv = 0, head_dim = 0;  // this rank's heads
  DType dtype = DType::kF32;                        // q, k, v (and K/V on the wire)
  int64_t kv_numel() const { return batch * seq * heads_kv * head_dim; }
  int64_t tokens() const { return batch * seq; }
};

class AllGatherContextAttention final : public AttentionPlan {
 public:
  AllGatherContextAttention(const Communicator& context, const kernels::Kernels& kernels)
      : context_(context), kernels_(kernels) {}
  void forward(TensorView out, TensorView lse, TensorView q, TensorView k, TensorView v,
               const TokenLayout& tokens, const kernels::AttentionParams& dims) override;
  void backward(TensorView dq, TensorView dk, TensorView dv, TensorView d_out, TensorView out,
                TensorView lse, TensorView q, TensorView k, TensorView v, const TokenLayout& tokens,
                const kernels::AttentionParams& dims) override;
  kernels::AttentionStats stats() const override { return stats_; }

  static void add_forward_traffic(Traffic& traffic, const std::string& axis, int64_t cp,
                                  const AttentionOperands& x);
  static void add_backward_traffic(Traffic& traffic, const std::string& axis, int64_t cp,
                                   const AttentionOperands& x);
  static int64_t staging_bytes(int64_t cp, const AttentionOperands& x);
  int64_t held_bytes() const override;

 private:
  // Gathers this rank's K, V, positions and segment ids from every context rank into
  // full_k_/full_v_ (B, cp·S, Hkv, D) and full_pos_/full_seg_ (B, cp·S), rank-major per row.
  void gather_keys(TensorView k, TensorView v, const TokenLayout& tokens);

  const Communicator& context_;
  const kernels::Kernels& kernels_;
  kernels::AttentionStats stats_;
  // Staging in the backend's memory: K and V in their dtype, the gradients in f32.
  Tensor send_, recv_;                        // K | V of this rank, of every rank
  Tensor grad_send_, grad_recv_;              // dK | dV blocks of every rank, of this rank
  Tensor full_k_, full_v_;                    // (B, cp·S, Hkv, D)
  Tensor full_dk_, full_dv_;                  // (B, cp·S, Hkv, D)
  std::vector<int32_t> full_pos_, full_seg_;  // (B, cp·S)
  kernels::DeviceIndices full_pos_device_, full_seg_device_;  // the same, in the backend's memory
  std::vector<int32_t> send_ids_, recv_ids_;
};

class RingContextAttention final : public AttentionPlan {
 public:
  RingContextAttention(const Communicator& context, const kernels::Kernels& kernels)
      : context_(context), kernels_(kernels) {}
  void forward(TensorView out, TensorView lse, TensorView q, TensorView k, TensorView v,
               const TokenLayout& tokens, const kernels::AttentionParams& dims) override;
  void backward(TensorView dq, TensorView dk, TensorView dv, TensorView d_out, TensorView out,
                TensorView lse, TensorView q, TensorView k, TensorView v, const TokenLayout& tokens,
                const kernels::AttentionParams& dims) override;
  kernels::AttentionStats stats() const override { return stats_; }

  static void add_forward_traffic(Traffic& traffic, const std::string& axis, int64_t cp,
                                  const AttentionOperands& x);
  static void add_backward_traffic(Traffic& traffic, const std::string& axis, int64_t cp,
                                   const AttentionOperands& x);
  static int64_t staging_bytes(int64_t cp, const AttentionOperands& x);
  int64_t held_bytes() const override;

 private:
  // Slot 0 := this rank's K, V, positions and segment ids.
  void load_own_chunk(TensorView k, TensorView v, const TokenLayout& tokens);
  // Sends slot `cur` to the next rank and receives the previous rank's into the other slot.
  std::vector<Request> pass_chunk_along(int cur);
  // The live part of a chunk slot: K | V, or dK | dV.
  TensorView chunk_kv(int slot) const { return chunk_kv_[slot].view().elements(0, 2 * kv_numel_); }
  TensorView chunk_grad(int slot) const {
    return chunk_grad_[slot].view().elements(0, 2 * kv_numel_);
  }

  const Communicator& context_;
  const kernels::Kernels& kernels_;
  kernels::AttentionStats stats_;
  // Two chunk slots (current, next): K, V (B, S, Hkv, D), positions, segments (B, S); the
  // backward's travelling dK/dV accumulators likewise.
  int64_t kv_numel_ = 0;                     // B·S·Hkv·D of the current call
  Tensor chunk_kv_[2];                       // K then V, 2·B·S·Hkv·D, in K's dtype
  std::vector<int32_t> chunk_ids_[2];        // positions then segments, 2·B·S
  kernels::DeviceIndices chunk_ids_device_;  // the chunk in use's ids, in the backend's memory
  Tensor chunk_grad_[2];                     // dK then dV, 2·B·S·Hkv·D, f32
  // The output's f32 accumulator and one step's partial (out, lse).
  Tensor merged_out_, partial_out_, partial_lse_;
};

}  // namespace maxctx::parallel

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
#include <vector>

#include "maxctx/mesh/communicator.h"
#include "maxctx/parallel/model_plan.h"

namespace maxctx::parallel {

class AllGatherContextAttention final : public AttentionPlan {
 public:
  AllGatherContextAttention(const Communicator& context, const kernels::Kernels& kernels)
      : context_(context), kernels_(kernels) {}
  void forward(float* out, float* lse, const float* q, const float* k, const float* v,
               const TokenLayout& tokens, const kernels::AttentionParams& dims) override;
  void backward(float* dq, float* dk, float* dv, const float* d_out, const float* out,
                const float* lse, const float* q, const float* k, const float* v,
                const TokenLayout& tokens, const kernels::AttentionParams& dims) override;
  kernels::AttentionStats stats() const override { return stats_; }

 private:
  // Gathers this rank's K, V, positions and segment ids from every context rank into
  // full_k_/full_v_ (B, cp·S, Hkv, D) and full_pos_/full_seg_ (B, cp·S), rank-major per row.
  void gather_keys(const float* k, const float* v, const TokenLayout& tokens,
                   const kernels::AttentionParams& dims);

  const Communicator& context_;
  const kernels::Kernels& kernels_;
  kernels::AttentionStats stats_;
  std::vector<float> send_, recv_;            // staging for the collectives
  std::vector<float> full_k_, full_v_;        // (B, cp·S, Hkv, D)
  std::vector<float> full_dk_, full_dv_;      // (B, cp·S, Hkv, D)
  std::vector<int32_t> full_pos_, full_seg_;  // (B, cp·S)
  std::vector<int32_t> send_ids_, recv_ids_;
};

class RingContextAttention final : public AttentionPlan {
 public:
  RingContextAttention(const Communicator& context, const kernels::Kernels& kernels)
      : context_(context), kernels_(kernels) {}
  void forward(float* out, float* lse, const float* q, const float* k, const float* v,
               const TokenLayout& tokens, const kernels::AttentionParams& dims) override;
  void backward(float* dq, float* dk, float* dv, const float* d_out, const float* out,
                const float* lse, const float* q, const float* k, const float* v,
                const TokenLayout& tokens, const kernels::AttentionParams& dims) override;
  kernels::AttentionStats stats() const override { return stats_; }

 private:
  // Slot 0 := this rank's K, V, positions and segment ids.
  void load_own_chunk(const float* k, const float* v, const TokenLayout& tokens, int64_t kv_numel);
  // Sends slot `cur` to the next rank and receives the previous rank's into the other slot.
  std::vector<Request> pass_chunk_along(int cur);

  const Communicator& context_;
  const kernels::Kernels& kernels_;
  kernels::AttentionStats stats_;
  // Two chunk slots (current, next): K, V (B, S, Hkv, D), positions, segments (B, S); the
  // backward's travelling dK/dV accumulators likewise.
  std::vector<float> chunk_kv_[2];     // K then V, 2·B·S·Hkv·D
  std::vector<int32_t> chunk_ids_[2];  // positions then segments, 2·B·S
  std::vector<float> chunk_grad_[2];   // dK then dV, 2·B·S·Hkv·D
  std::vector<float> partial_out_, partial_lse_;
};

}  // namespace maxctx::parallel

// The one owner of sharding (torchtitan's ParallelDims + parallelize_llama): which mesh axes a
// run may use, and the plans that carry the model over them.
//
//  - ParallelDims validates the mesh once, for training (data, fsdp, context, tensor, expert; the
//    inference axis must be 1) or for inference (context_autoregressive and expert; the other
//    training axes must be 1), with one clear error naming the right axis, and gives each axis'
//    size and this rank's coordinates.
//  - parallelize_training builds what the model's training forward and backward run with: the
//    attention plan (local, or context-parallel all_gather / ring by
//    context_parallel_strategy), the tensor-axis reducer, the expert axis' row exchange, and
//    with `shard_parameters` the fsdp / data / context / expert parameter sharding and gradient
//    sync. train and check-logits call it.
//  - parallelize_inference builds inference's: the sequence-sharded KV cache, prefill and decode
//    attention over context_autoregressive, the MLP/head row split of a sequence-sharded
//    decode, and a mixture of experts' experts split over expert × context_autoregressive (the
//    expert axis otherwise splits the decode slots: MaxText's inference rules). The inference
//    engine (decode, bench-inference) calls it.
// The per-weight tensor split is weight_sharding.h's; the token split is load_balance.h's.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "maxctx/config/config.h"
#include "maxctx/kernels/kernels.h"
#include "maxctx/mesh/mesh.h"
#include "maxctx/parallel/decode_attention.h"
#include "maxctx/parallel/kv_cache.h"
#include "maxctx/parallel/model_plan.h"
#include "maxctx/parallel/row_split.h"
#include "maxctx/parallel/sharded_parameters.h"
#include "maxctx/parallel/weight_sharding.h"

namespace maxctx::parallel {

enum class RunKind { kTraining, kInference };

struct ParallelDims {
  RunKind kind = RunKind::kTraining;
  // One degree per mesh axis, named as the axis: data, fsdp, context, context_autoregressive,
  // tensor, expert (generated from the axis list, core/mesh_axes.h).
#define MAXCTX_AXIS_DEGREE(Enumerator, name) int64_t name = 1;
  MAXCTX_MESH_AXES(MAXCTX_AXIS_DEGREE)
#undef MAXCTX_AXIS_DEGREE
  // data × fsdp × expert: how a training batch's rows are split (MaxText's activation_batch
  // rule: the expert axis shards the batch outside the experts, like data)
  int64_t data_shards = 1;
  int64_t data_rank = 0;  // this rank's share of the rows
  int tensor_rank = 0;
  int64_t context_rank = 0;

  // fsdp × context: how many ranks split a training run's parameters, gradients and optimizer
  // state (kParameterShardAxes).
  int64_t parameter_shards() const { return fsdp * context; }

  int64_t size(Axis axis) const;  // the degree of `axis`
  // "data=1 fsdp=2 context=1 context_autoregressive=1 tensor=1 expert=1", every axis in order.
  std::string text() const;

  // Throws maxctx::Error (the same verdict on every rank) when an axis is used that the run
  // kind does not shard over.
  static ParallelDims training(const Mesh& mesh);
  static ParallelDims inference(const Mesh& mesh);
  // The same checks on axis sizes alone (axis order of axis.h), for a planned mesh that no
  // process builds (`maxctx plan`): coordinates are rank 0's.
  static ParallelDims training(const AxisArray& sizes);
  static ParallelDims inference(const AxisArray& sizes);
};

// The axes a training run shards its parameters, gradients and AdamW moments over (ZeRO-3), as
// MaxText's logical rules shard them: a weight's model dimension over fsdp *and* context. The
// context ranks already hold different tokens; they need not hold the same weights, and a
// long-context run (context 16, fsdp 16) then keeps 1/256 of the state per chip instead of
// 1/16. Gradients are summed over the other batch axes (the experts' own weights, which only
// their expert rank holds, over data alone).
inline constexpr std::array<Axis, 2> kParameterShardAxes{Axis::kFsdp, Axis::kContext};
inline constexpr std::array<Axis, 2> kGradientReplicaAxes{Axis::kData, Axis::kExpert};
inline constexpr std::array<Axis, 1> kExpertGradientReplicaAxes{Axis::kData};

// The mesh a config describes for its num_devices ranks, without building it (`maxctx plan`):
// the -1s filled as the Mesh fills them, on as many nodes as the positive dcn factors multiply
// to. maxctx::Error (resolve_mesh_shape's) when the degrees do not fit the devices.
MeshShape planned_mesh_shape(const Config& config);

// The training model's plans; `model` points into the others (do not copy).
struct TrainingParallelPlans {
  std::unique_ptr<AttentionPlan> attention;
  std::unique_ptr<TensorReducer> tensor;
  std::unique_ptr<ShardedParameters> parameters;  // null for a forward-only run
  std::unique_ptr<TensorReducer> sequence;        // sum over context (null when context = 1)
  std::unique_ptr<ExpertExchange> experts;        // the expert axis (null when expert = 1)
  std::unique_ptr<SequenceChunks> chunks;         // context's chunks (null when context = 1)
  ModelPlan model;
};

TrainingParallelPlans parallelize_training(
    const Config& config, const Mesh& mesh, const ParallelDims& dims,
    const kernels::Kernels& kernels, const std::vector<WeightSpec>* shard_parameters = nullptr);

// How a decode step is sharded over context_autoregressive (and its slots over expert).
struct InferenceSharding {
  DecodeSharding decode = DecodeSharding::kSequence;
  int64_t slots = 1;                // decode slots of the whole job
  int64_t max_prefill_length = 0;   // tokens of the longest prompt (a multiple of ca)
  int64_t max_target_length = 0;    // prompt + generated tokens per slot
  bool quantize_kvcache = false;    // an int8 cache; else the cache holds `cache_dtype`
  DType cache_dtype = DType::kF32;  // the activation dtype (bf16: MaxText's inference default)
  int64_t num_experts = 0;          // a mixture of experts' experts (0: a dense model)
  int64_t vocab_size = 0;           // the embedding's and head's rows, split over ca
};

struct InferenceParallelPlans {
  std::unique_ptr<RowSplit> row_split;  // sequence-sharded decode over ca > 1, else null
  std::unique_ptr<KvCache> cache;
  std::unique_ptr<PrefillAttention> prefill;
  std::unique_ptr<DecodeAttention> decode;
  // A mixture of experts' experts split over expert × context_autoregressive (MaxText's `exp`
  // rule for inference); null when that group has one rank, for a dense model, or when the
  // group's size does not divide num_experts.
  std::unique_ptr<ExpertExchange> experts;
  // The embedding and head rows split over context_autoregressive (ca > 1; MaxText's `vocab`
  // rule for inference), else null: every rank holds them whole.
  std::unique_ptr<VocabSplit> vocab;
  // The attention projections' rows split over context_autoregressive (ca > 1: each stored
  // once across the axis), computed for ranks holding different tokens; else null.
  std::unique_ptr<TokenRowSplit> token_split;
};

// This rank's KV cache under `sharding` over ca = context_autoregressive ranks (sharding.slots:
// the slots of this rank's expert group).
KvCacheShape inference_cache_shape(const InferenceSharding& sharding, int64_t ca, int64_t layers,
                                   int64_t heads_kv, int64_t head_dim);

// The ranks inference splits a mixture of experts' experts over: `ranks` (the expert ×
// context_autoregressive group's size) when it divides num_experts (MaxText's `exp` rule), else
// 1 (every rank runs every expert). parallelize_inference builds from it and `maxctx plan`
// counts a decode step's bytes with it.
int64_t inference_expert_ranks(int64_t num_experts, int64_t ranks);

// The group inference splits the experts over: expert × context_autoregressive, a rank's rank in
// it ca_coord · expert + expert_coord (mesh.h's row-major order). Rank r of the group holds
// experts [r·X/ranks, (r+1)·X/ranks) when they split (infer::inference_weight_specs).
const Communicator& inference_expert_group(const Mesh& mesh);

// sharding.slots: the whole job's; rank holds the slots of its expert group, the block
// [g·slots/expert, (g+1)·slots/expert) for expert coordinate g (slots must divide by expert).
InferenceParallelPlans parallelize_inference(const InferenceSharding& sharding, const Mesh& mesh,
                                             const kernels::Kernels& kernels, int64_t layers,
                                             int64_t heads_kv, int64_t head_dim);

}  // namespace maxctx::parallel

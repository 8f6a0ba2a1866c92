#include "maxctx/parallel/parallelize.h"

#include <fmt/format.h>

#include "maxctx/core/check.h"
#include "maxctx/core/log.h"
#include "maxctx/parallel/context_attention.h"
#include "maxctx/parallel/expert_parallel.h"
#include "maxctx/parallel/local_attention.h"
#include "maxctx/parallel/sequence_chunks.h"
#include "maxctx/parallel/tensor_parallel.h"
#include "maxctx/parallel/vocab_split.h"

namespace maxctx::parallel {
namespace {

ParallelDims read_dims(const AxisArray& sizes, const AxisArray& coords, RunKind kind) {
  const auto at = [](const AxisArray& a, Axis axis) { return a[axis_index(axis)]; };
  ParallelDims d;
  d.kind = kind;
#define MAXCTX_READ_DEGREE(Enumerator, name) d.name = at(sizes, Axis::k##Enumerator);
  MAXCTX_MESH_AXES(MAXCTX_READ_DEGREE)
#undef MAXCTX_READ_DEGREE
  d.data_shards = d.data * d.fsdp * d.expert;
  d.data_rank = (at(coords, Axis::kData) * d.fsdp + at(coords, Axis::kFsdp)) * d.expert +
                at(coords, Axis::kExpert);
  d.tensor_rank = static_cast<int>(at(coords, Axis::kTensor));
  d.context_rank = at(coords, Axis::kContext);
  return d;
}

ParallelDims read_dims(const Mesh& mesh, RunKind kind) {
  AxisArray sizes{}, coords{};
  for (Axis axis : kAllAxes) {
    sizes[axis_index(axis)] = mesh.axis_size(axis);
    coords[axis_index(axis)] = mesh.coord(axis);
  }
  return read_dims(sizes, coords, kind);
}

constexpr AxisArray kRankZero{};

// The checks of ParallelDims::training and ::inference on dims read from a mesh or from sizes.
ParallelDims training_checked(const ParallelDims& d);
ParallelDims inference_checked(const ParallelDims& d);

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

}  // namespace

int64_t ParallelDims::size(Axis axis) const {
  switch (axis) {
#define MAXCTX_DEGREE_CASE(Enumerator, name) \
  case Axis::k##Enumerator:                  \
    return name;
    MAXCTX_MESH_AXES(MAXCTX_DEGREE_CASE)
#undef MAXCTX_DEGREE_CASE
  }
  return 1;
}

std::string ParallelDims::text() const {
  std::string text;
  for (Axis axis : kAllAxes) {
    text += fmt::format("{}{}={}", text.empty() ? "" : " ", axis_name(axis), size(axis));
  }
  return text;
}

ParallelDims ParallelDims::training(const Mesh& mesh) {
  return training_checked(read_dims(mesh, RunKind::kTraining));
}

ParallelDims ParallelDims::training(const AxisArray& sizes) {
  return training_checked(read_dims(sizes, kRankZero, RunKind::kTraining));
}

ParallelDims ParallelDims::inference(const Mesh& mesh) {
  return inference_checked(read_dims(mesh, RunKind::kInference));
}

ParallelDims ParallelDims::inference(const AxisArray& sizes) {
  return inference_checked(read_dims(sizes, kRankZero, RunKind::kInference));
}

namespace {

ParallelDims training_checked(const ParallelDims& d) {
  if (d.context_autoregressive != 1) {
    fail(
        "context_autoregressive = {} is the inference axis; training shards the sequence over "
        "`context` (ici_context_parallelism / dcn_context_parallelism), set "
        "ici_context_autoregressive_parallelism=1",
        d.context_autoregressive);
  }
  return d;
}

ParallelDims inference_checked(const ParallelDims& d) {
  if (d.context != 1) {
    fail(
        "context = {} is the training axis; inference shards the prompt and the KV cache over "
        "context_autoregressive: set ici_context_parallelism=1 and "
        "ici_context_autoregressive_parallelism={}",
        d.context, d.context * d.context_autoregressive);
  }
  // expert > 1 is MaxText's inference use of the axis: it splits the decode slots (and a
  // mixture of experts' experts, together with context_autoregressive; parallelize_inference).
  for (Axis axis : {Axis::kData, Axis::kFsdp, Axis::kTensor}) {
    const int64_t size = axis == Axis::kData ? d.data : axis == Axis::kFsdp ? d.fsdp : d.tensor;
    if (size != 1) {
      fail(
          "{} = {}: inference shards only over context_autoregressive and expert; set "
          "ici_{}_parallelism=1 and dcn_{}_parallelism=1",
          axis_name(axis), size, axis_name(axis), axis_name(axis));
    }
  }
  return d;
}

}  // namespace

MeshShape planned_mesh_shape(const Config& c) {
  MeshSpec spec;
  int64_t nodes = 1;
  for (size_t i = 0; i < spec.ici.size(); ++i) {
    spec.ici[i] = c.derived.ici_parallelism[i];
    spec.dcn[i] = c.derived.dcn_parallelism[i];
    if (spec.dcn[i] > 0) nodes *= spec.dcn[i];
  }
  const int64_t devices = c.derived.num_devices;
  if (devices % nodes != 0) {
    fail("the dcn_*_parallelism values multiply to {} nodes, which do not divide {} devices", nodes,
         devices);
  }
  return resolve_mesh_shape(spec, nodes, devices / nodes);
}

TrainingParallelPlans parallelize_training(const Config& c, const Mesh& mesh,
                                           const ParallelDims& dims,
                                           const kernels::Kernels& kernels,
                                           const std::vector<WeightSpec>* shard_parameters) {
  MAXCTX_CHECK(dims.kind == RunKind::kTraining, "training plans need the training dims");
  TrainingParallelPlans plans;
  const Communicator& context = mesh.axis(Axis::kContext);
  if (dims.context == 1) {
    plans.attention = std::make_unique<LocalAttention>(kernels);
  } else if (context_parallel_strategy(c) == ContextParallelStrategy::kRing) {
    plans.attention = std::make_unique<RingContextAttention>(context, kernels);
  } else {
    plans.attention = std::make_unique<AllGatherContextAttention>(context, kernels);
  }
  if (dims.tensor == 1) {
    plans.tensor = std::make_unique<NoTensorReduction>();
  } else {
    plans.tensor = std::make_unique<TensorAllReduce>(mesh.axis(Axis::kTensor), kernels.stream());
  }
  if (shard_parameters != nullptr) {
    plans.parameters = std::make_unique<ShardedParameters>(
        *shard_parameters, mesh.group(kParameterShardAxes), mesh.group(kGradientReplicaAxes),
        mesh.group(kExpertGradientReplicaAxes), mesh.axis(Axis::kExpert), mesh.axis(Axis::kTensor),
        kernels, parse_dtype(c.weight_dtype));
  }
  plans.model.kernels = &kernels;
  plans.model.attention = plans.attention.get();
  plans.model.tensor = plans.tensor.get();
  plans.model.weights = plans.parameters.get();
  plans.model.tensor_size = static_cast<int>(dims.tensor);
  plans.model.tensor_rank = dims.tensor_rank;
  if (dims.context > 1) {
    plans.sequence =
        std::make_unique<TensorAllReduce>(context, kernels.stream());  // sums over the axis given
    plans.model.sequence = plans.sequence.get();
    plans.chunks =
        std::make_unique<ContextSequenceChunks>(context, c.context_parallel_load_balance);
    plans.model.chunks = plans.chunks.get();
  }
  if (dims.expert > 1) {
    plans.experts = std::make_unique<ExpertAllToAll>(mesh.axis(Axis::kExpert), kernels.stream());
    plans.model.experts = plans.experts.get();
  }
  return plans;
}

KvCacheShape inference_cache_shape(const InferenceSharding& s, int64_t ca, int64_t layers,
                                   int64_t heads_kv, int64_t head_dim) {
  KvCacheShape shape;
  shape.layers = layers;
  shape.heads_kv = heads_kv;
  shape.head_dim = head_dim;
  shape.int8 = s.quantize_kvcache;
  shape.dtype = s.cache_dtype;
  if (s.decode == DecodeSharding::kSequence) {
    shape.slots = s.slots;
    shape.prefill_rows = s.max_prefill_length / ca;
    // Decode tokens go round-robin, so a rank owns at most ceil(T / ca) of a sequence's.
    shape.decode_rows = ceil_div(s.max_target_length, ca);
  } else {
    shape.slots = s.slots / ca;
    shape.prefill_rows = s.max_prefill_length;
    shape.decode_rows = s.max_target_length;
  }
  return shape;
}

int64_t inference_expert_ranks(int64_t num_experts, int64_t ranks) {
  return num_experts > 0 && ranks > 1 && num_experts % ranks == 0 ? ranks : 1;
}

const Communicator& inference_expert_group(const Mesh& mesh) {
  return mesh.group({Axis::kExpert, Axis::kContextAutoregressive});
}

InferenceParallelPlans parallelize_inference(const InferenceSharding& s, const Mesh& mesh,
                                             const kernels::Kernels& kernels, int64_t layers,
                                             int64_t heads_kv, int64_t head_dim) {
  const Communicator& ca_axis = mesh.axis(Axis::kContextAutoregressive);
  const int64_t ca = ca_axis.size();
  const int64_t expert = mesh.axis_size(Axis::kExpert);
  MAXCTX_CHECK(s.slots % expert == 0, "{} slots over expert = {}", s.slots, expert);
  InferenceSharding group = s;  // this rank's expert group: its block of the slots
  group.slots = s.slots / expert;
  InferenceParallelPlans plans;
  // Sequence-sharded decode runs the same tokens on every rank: the MLP and head rows split.
  if (s.decode == DecodeSharding::kSequence && ca > 1) {
    plans.row_split = std::make_unique<AxisRowSplit>(ca_axis, kernels);
  }
  if (ca > 1) {
    MAXCTX_CHECK_GT(s.vocab_size, 0, "the vocabulary to split over context_autoregressive");
    plans.vocab = std::make_unique<AxisVocabSplit>(ca_axis, kernels, s.vocab_size);
    // The attention projections are stored split over ca too: a prefill (and a batch-sharded
    // decode) computes their columns for every rank's tokens.
    plans.token_split = std::make_unique<AxisTokenRowSplit>(ca_axis, kernels);
  }
  plans.cache = std::make_unique<KvCache>(
      kernels, inference_cache_shape(group, ca, layers, heads_kv, head_dim));
  plans.prefill = std::make_unique<PrefillAttention>(kernels, ca_axis, s.decode, *plans.cache);
  plans.decode = std::make_unique<DecodeAttention>(kernels, ca_axis, s.decode, *plans.cache);
  // MaxText's inference shards the experts (`exp`) over expert × context_autoregressive: each
  // rank runs its experts' rows of every rank's tokens (prefill: each its prompt columns of its
  // group's slots; decode: the same tokens, or each its slots). Experts that do not split evenly
  // run whole on every rank.
  const Communicator& experts = inference_expert_group(mesh);
  if (s.num_experts > 0 && experts.size() > 1) {
    if (inference_expert_ranks(s.num_experts, experts.size()) == experts.size()) {
      plans.experts = std::make_unique<ExpertAllToAll>(experts, kernels.stream());
    } else {
      log::info(
          "expert x context_autoregressive = {} ranks do not divide num_experts = {}: every rank "
          "runs every expert",
          experts.size(), s.num_experts);
    }
  }
  return plans;
}

}  // namespace maxctx::parallel

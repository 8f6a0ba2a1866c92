#include "maxctx/plan/step_plan.h"

#include <algorithm>

#include "maxctx/core/check.h"
#include "maxctx/mesh/mesh.h"
#include "maxctx/mesh/root_task.h"
#include "maxctx/model/activations.h"
#include "maxctx/model/moe_block.h"
#include "maxctx/model/remat.h"
#include "maxctx/model/weights.h"
#include "maxctx/parallel/context_attention.h"
#include "maxctx/parallel/expert_parallel.h"
#include "maxctx/parallel/load_balance.h"
#include "maxctx/parallel/sequence_chunks.h"
#include "maxctx/parallel/sharded_parameters.h"
#include "maxctx/train/checkpoint_shards.h"
#include "maxctx/train/initial_state.h"
#include "maxctx/train/training_axes.h"

namespace maxctx::plan {
namespace {

using parallel::ShardedParameters;

constexpr const char* kWorldAxis = "world";  // Communicator::world()'s trace name

int64_t weight_size(const model::LlamaConfig& m) {
  return static_cast<int64_t>(dtype_size(m.weight_dtype));
}

// The axis names the trainer's communicators carry (mesh.h group_trace_name).
struct StepGroups {
  std::string shards, replicas, expert_replicas, expert, tensor, context, batch;
};

StepGroups step_groups(const AxisArray& sizes) {
  const auto name = [&](std::span<const Axis> axes) { return group_trace_name(sizes, axes); };
  const auto name_of = [&](std::initializer_list<Axis> axes) {
    return name(std::span<const Axis>(axes.begin(), axes.size()));
  };
  return {name(parallel::kParameterShardAxes),
          name(parallel::kGradientReplicaAxes),
          name(parallel::kExpertGradientReplicaAxes),
          name_of({Axis::kExpert}),
          name_of({Axis::kTensor}),
          name_of({Axis::kContext}),
          name_of({Axis::kData, Axis::kFsdp, Axis::kContext, Axis::kExpert})};
}

void add_group(std::map<std::string, GroupLink>& groups, const MeshShape& shape,
               const std::string& name, std::span<const Axis> axes) {
  GroupLink link;
  for (Axis axis : axes) {
    link.ranks *= shape.axis_size(axis);
    link.dcn = link.dcn || shape.dcn[axis_index(axis)] > 1;
  }
  if (link.ranks > 1) groups[name] = link;
}
void add_group(std::map<std::string, GroupLink>& groups, const MeshShape& shape,
               const std::string& name, std::initializer_list<Axis> axes) {
  add_group(groups, shape, name, std::span<const Axis>(axes.begin(), axes.size()));
}

// One micro-batch's forward and backward, as llama_forward / llama_backward call the weight
// plan (before_use, gradients_ready), the attention plan and the tensor reducer.
Traffic micro_batch_traffic(const model::LlamaConfig& m, const model::RematPolicy& remat,
                            const std::vector<ShardedParameters::Unit>& units,
                            const parallel::AttentionOperands& x, int64_t cp, bool ring,
                            bool load_balance, int64_t tensor, const StepGroups& g) {
  Traffic t;
  const int64_t L = m.num_layers;
  const auto gather = [&](int64_t unit) {
    ShardedParameters::add_gather_traffic(t, units[static_cast<size_t>(unit)], m.weight_dtype,
                                          g.shards);
  };
  // Forward: embedding, layers, head (with tied embeddings the head gathers the embedding too).
  for (int64_t u = 0; u <= L + 1; ++u) gather(u);
  if (m.tie_embeddings) gather(0);
  // Backward: the head again (not when the loss is tiled: llama_forward_backward runs each
  // tile's head backward right after its forward), then the layers; the embedding's backward
  // reads no weights.
  if (m.vocab_tiles == 1) {
    gather(L + 1);
    if (m.tie_embeddings) gather(0);
  }
  for (int64_t u = L; u >= 1; --u) gather(u);
  for (const ShardedParameters::Unit& u : units) {
    ShardedParameters::add_gradient_traffic(t, u, g.shards, g.replicas, g.expert_replicas,
                                            g.expert);
  }

  const bool recompute_attention = !remat.save_all && !remat.context;
  if (cp > 1) {
    Traffic layer;
    const auto forward = ring ? &parallel::RingContextAttention::add_forward_traffic
                              : &parallel::AllGatherContextAttention::add_forward_traffic;
    const auto backward = ring ? &parallel::RingContextAttention::add_backward_traffic
                               : &parallel::AllGatherContextAttention::add_backward_traffic;
    forward(layer, g.context, cp, x);
    if (recompute_attention) forward(layer, g.context, cp, x);
    backward(layer, g.context, cp, x);
    t.add(layer, L);
  }
  if (tensor > 1) {
    // f32 partial sums of (N, E): o_proj and down_proj (or the experts' w2) forward, the
    // input gradients of q/k/v and gate/up backward, o_proj again when it is recomputed.
    const int64_t stream = x.tokens() * m.emb_dim * int64_t{sizeof(float)};
    int64_t sums = 4 + (!remat.save_all && !remat.out_proj ? 1 : 0);
    if (m.moe) {
      // moe_backward sums d_choice_weight (N, K) and d_x in place of mlp's one sum.
      t.add(g.tensor, CollectiveKind::kAllReduce,
            x.tokens() * m.num_experts_per_tok * int64_t{sizeof(float)}, L);
    }
    t.add(g.tensor, CollectiveKind::kAllReduce, stream, sums * L);
  }
  if (m.moe && cp > 1 && m.load_balance_loss_weight > 0) {
    // The load-balance statistics (B, 2, X) of each layer's forward, summed over context.
    t.add(g.context, CollectiveKind::kAllReduce,
          x.batch * 2 * m.num_experts * int64_t{sizeof(float)}, L);
  }
  if (m.moe && cp > 1 && !m.sparse_matmul && m.capacity_factor > 0) {
    // Dense dispatch with dropping: each layer's forward gathers its chunks' expert counts.
    Traffic counts;
    parallel::ContextSequenceChunks::add_traffic(
        counts, g.context, cp, x.batch,
        static_cast<int64_t>(parallel::context_chunks_of(cp, 0, load_balance).size()),
        m.num_experts);
    t.add(counts, L);
  }
  if (m.moe && g.expert != "self") {
    // Each layer's routed rows to their experts' ranks and back, forward and backward.
    const int64_t rows = model::moe_dispatch_rows(m, x.batch, x.seq, cp);
    Traffic layer;
    parallel::ExpertAllToAll::add_forward_traffic(layer, g.expert, m.num_experts, rows, m.emb_dim,
                                                  m.dtype);
    parallel::ExpertAllToAll::add_backward_traffic(layer, g.expert, rows, m.emb_dim);
    t.add(layer, L);
  }
  return t;
}

}  // namespace

TrainingPlan plan_training(const Config& config) {
  const MeshShape shape = parallel::planned_mesh_shape(config);
  const AxisArray sizes = shape.axis_sizes();
  TrainingPlan p;
  p.dims = train::check_training_axes(config, parallel::ParallelDims::training(sizes));
  const model::LlamaConfig m = train::training_model_config(config);
  const Config c = train::with_model_dimensions(config, m);
  const int tp = static_cast<int>(p.dims.tensor);
  const int ep = static_cast<int>(p.dims.expert);
  const std::vector<model::WeightSpec> specs = model::llama_weight_specs(m, tp, 0, ep, 0);
  const std::vector<ShardedParameters::Unit> units =
      ShardedParameters::shard_units(specs, static_cast<int>(p.dims.parameter_shards()), 0);
  p.rows = c.derived.global_batch_size_to_train_on / p.dims.data_shards;
  p.local_seq = context_shard_len(c.max_target_length, p.dims.context);
  const model::RematPolicy remat = model::remat_policy_of(c);

  // Memory, as ShardedParameters, allocate_activations and the attention plans allocate it.
  int64_t shard = 0, largest_unit = 0;
  for (const ShardedParameters::Unit& u : units) {
    shard += u.shard_count;
    largest_unit = std::max(largest_unit, u.end - u.begin);
  }
  const int64_t f32 = sizeof(float);
  p.memory.parameters = shard * weight_size(m);
  p.memory.optimizer = 2 * shard * weight_size(m);
  p.memory.gradients = shard * f32 * (c.gradient_accumulation_steps > 1 ? 2 : 1);
  // One shard gathers nothing: the full buffers are the shard (ShardedParameters::full_is_shard).
  p.memory.gathered_units =
      p.dims.parameter_shards() > 1 ? largest_unit * (weight_size(m) + f32) : 0;
  // The trainer's starting state and checkpoint saves (train/checkpoint_shards.h): a fresh
  // initialisation generates each unit's shard alone, through one f32 host buffer; a load or a
  // resume reads each rank's shard straight into place; a save stages rank 0's share (its whole
  // shard: it holds the first copy of everything it has).
  int64_t largest_shard = 0;
  for (const ShardedParameters::Unit& u : units)
    largest_shard = std::max(largest_shard, u.shard_count);
  p.memory.starting_state =
      c.load_parameters_path.empty() ? largest_shard * f32 : io::kSliceConversionBytes;
  p.memory.can_resume = c.enable_checkpointing || !c.load_full_state_path.empty();
  if (c.enable_checkpointing) {
    p.memory.checkpoint_state =
        train::staged_checkpoint_bytes(specs, units, parallel::ReplicaPosition{}, m.weight_dtype);
  }
  p.memory.async_checkpointing = c.async_checkpointing;
  const int64_t tokens = p.rows * p.local_seq;
  // On a device the policy's offloaded tensors wait in host memory; where the device's memory
  // is the host's they stay in place (model/remat.h, allocate_activations).
  const model::ActivationBytes act = model::activation_bytes_per_token(m, remat, tp);
  const model::ActivationBytes in_place =
      model::activation_bytes_per_token(m, model::without_offload(remat), tp);
  p.memory.activations_on_a_device =
      act.layers_per_token * tokens + act.other_bytes(tokens, m.vocab_tiles);
  p.memory.offloaded_on_a_device = act.offloaded_per_token * tokens;
  p.memory.activations_on_the_host =
      in_place.layers_per_token * tokens + in_place.other_bytes(tokens, m.vocab_tiles);
  p.memory.logits = act.logits_per_row * model::logit_rows(tokens, m.vocab_tiles);
  if (m.moe) {
    const int64_t cp = p.dims.context;
    const model::MoeBufferBytes moe = model::moe_buffer_bytes(m, p.rows, p.local_seq, cp, ep);
    p.memory.activations_on_a_device += moe.per_layer * m.num_layers + moe.backward;
    p.memory.activations_on_the_host += moe.per_layer * m.num_layers + moe.backward;
    const model::MoeBufferBytes most =
        model::moe_buffer_bytes(m, p.rows, p.local_seq, cp, ep,
                                model::moe_most_received_rows(m, p.rows, p.local_seq, cp, ep));
    p.memory.expert_routing_skew =
        (most.per_layer - moe.per_layer) * m.num_layers + most.backward - moe.backward;
  }
  p.memory.set_host_is_device(true);  // the caller sets the machine's (cli/plan.cpp)
  const model::LocalDims d = model::local_dims(m, p.rows, p.local_seq, tp);
  const parallel::AttentionOperands x{p.rows, p.local_seq, d.Hq, d.Hkv, d.D, m.dtype};
  const int64_t cp = p.dims.context;
  const bool ring = context_parallel_strategy(c) == ContextParallelStrategy::kRing;
  if (cp > 1) {
    p.memory.attention_staging = ring ? parallel::RingContextAttention::staging_bytes(cp, x)
                                      : parallel::AllGatherContextAttention::staging_bytes(cp, x);
  }

  // Communication: every micro-batch's, then the step's sums and the gradient norm.
  const StepGroups g = step_groups(sizes);
  p.traffic.add(micro_batch_traffic(m, remat, units, x, cp, ring, c.context_parallel_load_balance,
                                    p.dims.tensor, g),
                c.gradient_accumulation_steps);
  p.traffic.add(g.batch, CollectiveKind::kAllReduce, sizeof(double));      // total weight
  p.traffic.add(g.batch, CollectiveKind::kAllReduce, 5 * sizeof(double));  // loss sums
  ShardedParameters::add_grad_norm_traffic(p.traffic, g.shards, g.tensor, g.expert);
  // The step's metrics line, written by rank 0 (run_on_root over the world).
  if (c.derived.num_devices > 1) {
    p.traffic.add(kWorldAxis, CollectiveKind::kBroadcast, kRootTaskBroadcastBytes);
  }
  add_group(p.groups, shape, g.shards, parallel::kParameterShardAxes);
  add_group(p.groups, shape, g.replicas, parallel::kGradientReplicaAxes);
  add_group(p.groups, shape, g.expert_replicas, parallel::kExpertGradientReplicaAxes);
  add_group(p.groups, shape, g.expert, {Axis::kExpert});
  add_group(p.groups, shape, g.tensor, {Axis::kTensor});
  add_group(p.groups, shape, g.context, {Axis::kContext});
  add_group(p.groups, shape, g.batch, {Axis::kData, Axis::kFsdp, Axis::kContext, Axis::kExpert});
  add_group(p.groups, shape, kWorldAxis,
            {Axis::kData, Axis::kFsdp, Axis::kContext, Axis::kContextAutoregressive, Axis::kTensor,
             Axis::kExpert});

  // FLOPs: MaxText's model count, and what the remat policy adds by recomputing forward parts
  // of each layer (in the same terms: 2 FLOPs per multiply-add, causal attention halved): the
  // step's matmuls as StepWork lists them, attention's forward once more unless it is saved.
  p.work =
      training_step_work(m, remat, {p.rows, p.local_seq, tp, ep, p.dims.context},
                         c.gradient_accumulation_steps, shard, c.gradient_clipping_threshold > 0);
  p.model_tflops = training_tflops_per_device(flops_model(c), c.per_device_batch_size,
                                              c.max_target_length, c.gradient_accumulation_steps);
  p.executed_tflops = p.model_tflops;
  for (const MatmulWork& mm : p.work.matmuls) {
    p.executed_tflops.learnable_weight += mm.recomputed_flops() / 1e12;
  }
  if (!remat.save_all && !remat.context) {
    // The forward is a third of the model's attention count.
    p.executed_tflops.attention += p.model_tflops.attention / 3;
  }
  p.executed_tflops.total = p.executed_tflops.learnable_weight + p.executed_tflops.attention;
  return p;
}

StepTime predict_step_time(const TrainingPlan& plan, const Config& c,
                           const HardwareProfile& profile) {
  const std::string backward_kind = c.dtype + "_backward";
  StepTime t;
  for (const MatmulWork& mm : plan.work.matmuls) {
    t.matmul_seconds += mm.forward_flops() / profile.matmul_rate(c.dtype, mm.smallest()) +
                        mm.backward_flops() / profile.matmul_rate(backward_kind, mm.smallest());
  }
  t.attention_seconds =
      plan.executed_tflops.attention * 1e12 / profile.attention_rate(c.dtype, plan.work.head_dim);
  for (const VectorWork& v : plan.work.vectors) {
    t.vector_seconds += profile.vector_seconds(v.op, v.elements, v.bytes_per_element);
  }
  t.compute_seconds = t.matmul_seconds + t.attention_seconds + t.vector_seconds;
  t.communication_seconds = communication_seconds(plan.traffic, plan.groups, profile);
  t.mfu = plan.model_tflops.total * 1e12 / (t.seconds() * profile.flops(c.dtype));
  return t;
}

}  // namespace maxctx::plan

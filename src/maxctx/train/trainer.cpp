#include "maxctx/train/trainer.h"

#include <algorithm>
#include <chrono>
#include <cmath>

#include "maxctx/core/check.h"
#include "maxctx/core/fault_injection.h"
#include "maxctx/core/log.h"
#include "maxctx/core/memory_check.h"
#include "maxctx/mesh/root_task.h"
#include "maxctx/model/activations.h"
#include "maxctx/model/llama.h"
#include "maxctx/model/llama_config.h"
#include "maxctx/model/memory_estimate.h"
#include "maxctx/model/weights.h"
#include "maxctx/parallel/load_balance.h"
#include "maxctx/parallel/parallelize.h"
#include "maxctx/parallel/tensor_parallel.h"
#include "maxctx/train/checkpoint.h"
#include "maxctx/train/data.h"
#include "maxctx/train/metrics.h"
#include "maxctx/train/optimizer.h"
#include "maxctx/train/recall.h"
#include "maxctx/train/schedule.h"

namespace maxctx::train {
namespace {

namespace fs = std::filesystem;

// The mesh rules are parallelize's; what is checked here is the run's batch against them.
parallel::ParallelDims check_training_mesh(const Config& c, const Mesh& mesh) {
  const parallel::ParallelDims t = parallel::ParallelDims::training(mesh);
  const int64_t batch = c.derived.global_batch_size_to_train_on;
  if (batch % t.data_shards != 0) {
    fail(
        "the global batch of {} sequences (per_device_batch_size {} x {} devices) does not "
        "split over data x fsdp = {} x {}; make it a multiple of {}",
        batch, c.per_device_batch_size, c.derived.num_devices, t.data, t.fsdp, t.data_shards);
  }
  validate_batch(c, t.context);
  check_context_split(c.max_target_length, t.context, c.context_parallel_load_balance);
  if (c.gradient_accumulation_steps != 1) {
    fail("gradient_accumulation_steps = {} is not implemented yet; use 1",
         c.gradient_accumulation_steps);
  }
  return t;
}

fs::path run_directory_of(const Config& c) {
  const fs::path base =
      c.base_output_directory.empty() ? fs::path("runs") : fs::path(c.base_output_directory);
  return base / (c.run_name.empty() ? "maxctx_" + c.model_name : c.run_name);
}

}  // namespace

struct Trainer::State {
  Config config;
  const Mesh& mesh;
  const kernels::Kernels& kernels;
  parallel::ParallelDims axes;
  model::LlamaConfig model_config;
  std::vector<model::WeightSpec> global_specs;  // unsharded (checkpoints)
  std::vector<model::WeightSpec> specs;         // this tensor rank's blocks
  parallel::TrainingPlans plans;                // attention, tensor reducer, sharded parameters
  model::LlamaWeights weights, gradients;
  model::LlamaActivations acts;
  std::unique_ptr<DataLoader> loader;
  AdamWConfig adamw;
  LearningRateSchedule schedule;
  std::unique_ptr<MetricLogger> metrics;
  fs::path run_dir;
  int64_t step = 0;
  std::vector<StepRecord> history;

  State(const Config& c, const Mesh& m, const kernels::Kernels& k)
      : config(c), mesh(m), kernels(k), axes(check_training_mesh(c, m)) {}

  const Communicator& batch_group() const {
    return mesh.group({Axis::kData, Axis::kFsdp, Axis::kContext});
  }

  void save_checkpoint() {
    Tensor params, m, v;
    plans.parameters->gather_full(params, m, v);
    const auto& tensor = mesh.axis(Axis::kTensor);
    params = parallel::gather_blocks(kernels, params.view(), global_specs, specs, tensor);
    m = parallel::gather_blocks(kernels, m.view(), global_specs, specs, tensor);
    v = parallel::gather_blocks(kernels, v.view(), global_specs, specs, tensor);
    // Rank 0 writes; a failure there (disk full) ends every rank with its message.
    // The metrics of the steps so far reach the disk first: a kill after the checkpoint loses
    // no logged step it covers. Old checkpoints go only once the new one is complete.
    run_on_root(mesh.world(), [&] {
      metrics->flush();
      write_checkpoint(run_dir, {step, loader->position(), format_config(config)}, global_specs,
                       params.view(), m.view(), v.view());
      remove_old_checkpoints(run_dir, config.max_num_checkpoints_to_keep);
      log::info("saved checkpoint {} in {}", step, (run_dir / "checkpoints").string());
    });
  }
};

Trainer::Trainer(const Config& config, const Mesh& mesh, const kernels::Kernels& kernels)
    : state_(std::make_unique<State>(config, mesh, kernels)) {
  State& s = *state_;
  const Config& c = s.config;
  s.model_config = model::llama_config_from(c);
  const int tp = static_cast<int>(s.axes.tensor);
  // Before any weight list or buffer is built: a run that cannot fit is one line, not bad_alloc.
  const model::MemoryEstimate memory = model::training_memory(
      s.model_config, c.derived.global_batch_size_to_train_on / s.axes.data_shards,
      context_shard_len(c.max_target_length, s.axes.context), tp);
  check_fits_in_memory(memory.bytes, mesh.world_size(), mesh.num_nodes(), "training",
                       memory.detail);
  s.global_specs = model::llama_weight_specs(s.model_config);
  s.specs =
      model::llama_weight_specs(s.model_config, tp, static_cast<int>(mesh.coord(Axis::kTensor)));

  s.plans = parallel::parallelize_training(c, mesh, s.axes, s.kernels, &s.specs);
  s.weights = model::bind_weights(s.specs, s.plans.parameters->full_params());
  s.gradients = model::bind_weights(s.specs, s.plans.parameters->full_grads());

  const int64_t rows = c.derived.global_batch_size_to_train_on / s.axes.data_shards;
  const int64_t local_seq = context_shard_len(c.max_target_length, s.axes.context);
  s.acts = model::allocate_activations(s.kernels, s.model_config, rows, local_seq, tp);
  s.adamw = adamw_config(c);
  s.schedule = learning_rate_schedule(c);
  s.run_dir = run_directory_of(c);

  DataShard shard;
  shard.global_batch_rows = c.derived.global_batch_size_to_train_on;
  shard.data_shards = s.axes.data_shards;
  shard.data_rank = s.axes.data_rank;
  shard.cp = s.axes.context;
  shard.cp_rank = mesh.coord(Axis::kContext);
  shard.load_balance = c.context_parallel_load_balance;

  // Resume from the latest complete checkpoint, or initialise from the counter-based RNG
  // (every rank generates the unsharded tensors' bytes, so every mesh starts identically).
  std::optional<int64_t> latest;
  if (c.enable_checkpointing) latest = latest_checkpoint_step(s.run_dir);
  int64_t data_position = 0;
  // The unsharded weights (and moments when resuming) pass through host buffers of the
  // weights' dtype, one copy each, before this rank keeps its shard.
  const int64_t global_numel = model::total_numel(s.global_specs);
  const DType weight_dtype = s.model_config.weight_dtype;
  Tensor params = s.kernels.empty({global_numel}, weight_dtype), m, v;
  if (latest) {
    m = s.kernels.empty({global_numel}, weight_dtype);
    v = s.kernels.empty({global_numel}, weight_dtype);
    const CheckpointState restored =
        read_checkpoint(s.run_dir, *latest, s.global_specs, params.view(), m.view(), v.view());
    s.step = restored.step;
    data_position = restored.data_position;
    log::info("resuming from checkpoint {} (data position {})", s.step, data_position);
  } else if (!c.load_parameters_path.empty()) {
    fail(
        "load_parameters_path is read by the Hugging Face import; training from it is not "
        "wired yet (got '{}')",
        c.load_parameters_path);
  } else {
    model::init_weights(s.kernels, s.global_specs, params.view(),
                        static_cast<uint64_t>(c.init_weights_seed));
  }
  Tensor local = parallel::local_blocks(s.kernels, params.view(), s.global_specs, s.specs);
  params = Tensor();
  Tensor local_m, local_v;
  if (latest) {
    local_m = parallel::local_blocks(s.kernels, m.view(), s.global_specs, s.specs);
    local_v = parallel::local_blocks(s.kernels, v.view(), s.global_specs, s.specs);
  }
  m = Tensor();
  v = Tensor();
  s.plans.parameters->set_from_full(local.view(), local_m.view(), local_v.view());
  s.loader = std::make_unique<DataLoader>(make_data_source(c), shard, data_position);

  MetricLoggerOptions options;
  options.jsonl_path = (s.run_dir / "metrics.jsonl").string();
  options.run_name = s.run_dir.filename().string();
  options.total_steps = c.steps;
  options.tflops_per_device =
      training_tflops_per_device(flops_model(c), c.per_device_batch_size, c.max_target_length)
          .total;
  options.tokens_per_device =
      training_tokens_per_device(c.per_device_batch_size, c.max_target_length);
  options.flush_period = c.log_period;
  options.append = latest.has_value();
  // Rank 0 creates the run directory and the metrics file; every rank learns whether it could.
  run_on_root(mesh.world(), [&] {
    fs::create_directories(s.run_dir);
    s.metrics = std::make_unique<MetricLogger>(options);
  });
  if (!s.metrics) s.metrics = std::make_unique<MetricLogger>(options);  // ranks > 0: no file
  log::info("model: {} parameters; data: {}; mesh: data={} fsdp={} context={} tensor={}",
            s.model_config.num_parameters(), s.loader->source().describe(), s.axes.data,
            s.axes.fsdp, s.axes.context, s.axes.tensor);
}

Trainer::~Trainer() = default;

void Trainer::run(int64_t max_new_steps) {
  State& s = *state_;
  const Config& c = s.config;
  const int64_t last = max_new_steps < 0 ? c.steps : std::min(c.steps, s.step + max_new_steps);
  auto previous = std::chrono::steady_clock::now();
  while (s.step < last) {
    inject_step_faults(s.step);
    s.plans.parameters->begin_step();
    const Batch batch = s.loader->next();
    std::vector<float> loss_weights(batch.size());
    for (int64_t i = 0; i < batch.size(); ++i) {
      loss_weights[i] = batch.target_segment_ids[i] != 0 ? 1.0f : 0.0f;
    }
    const model::TokenBatch tokens{
        batch.rows,           batch.seq_len,          batch.tokens.data(),
        batch.targets.data(), batch.positions.data(), batch.segment_ids.data(),
        loss_weights.data()};
    // The mean is over the global batch: its total weight is known before the backward.
    double global_weight = static_cast<double>(total_weights(batch));
    s.batch_group().all_reduce(std::span<double>(&global_weight, 1), ReduceOp::kSum);
    const model::LossSums sums =
        model::llama_forward(s.model_config, s.weights, tokens, s.plans.model, s.acts);
    const ScoredAccuracy accuracy =
        scored_accuracy_from_logits(s.acts.logits.span<float>(), s.model_config.vocab_size, batch);
    const float d_loss = global_weight > 0 ? static_cast<float>(1.0 / global_weight) : 0.0f;
    model::llama_backward(s.model_config, s.weights, s.gradients, tokens, s.plans.model, s.acts,
                          d_loss);

    double totals[3] = {sums.loss_sum, static_cast<double>(accuracy.correct),
                        static_cast<double>(accuracy.scored)};
    s.batch_group().all_reduce(std::span<double>(totals, 3), ReduceOp::kSum);
    const double raw_norm = s.plans.parameters->global_grad_norm();
    clip_by_global_norm(s.plans.parameters->grad_shard(), raw_norm, c.gradient_clipping_threshold);
    const double learning_rate = learning_rate_at(s.schedule, s.step);
    const std::span<float> grads = s.plans.parameters->grad_shard();
    adamw_update(s.kernels, s.adamw, s.step + 1, static_cast<float>(learning_rate),
                 s.plans.parameters->master(),
                 TensorView::of(grads.data(), static_cast<int64_t>(grads.size())),
                 s.plans.parameters->adam_m(), s.plans.parameters->adam_v());

    StepRecord record;
    record.step = s.step;
    record.loss = global_weight > 0 ? totals[0] / global_weight : 0.0;
    record.grad_norm = raw_norm;
    record.accuracy = totals[2] > 0 ? totals[1] / totals[2] : 0.0;
    record.total_weights = static_cast<int64_t>(global_weight);
    s.history.push_back(record);
    ++s.step;

    const auto now = std::chrono::steady_clock::now();
    StepMetrics metrics;
    metrics.step = record.step;
    metrics.seconds = std::chrono::duration<double>(now - previous).count();
    metrics.loss = record.loss;
    metrics.total_weights = record.total_weights;
    metrics.learning_rate = learning_rate;
    const double threshold = c.gradient_clipping_threshold;
    metrics.grad_norm = threshold > 0 && raw_norm > threshold ? threshold : raw_norm;
    metrics.raw_grad_norm = raw_norm;
    metrics.extra.push_back({"learning/accuracy", record.accuracy});
    run_on_root(s.mesh.world(), [&] { s.metrics->log_step(metrics); });
    previous = now;
    if (c.enable_checkpointing && (s.step % c.checkpoint_period == 0 || s.step == c.steps)) {
      s.save_checkpoint();
    }
  }
  run_on_root(s.mesh.world(), [&] { s.metrics->flush(); });
}

int64_t Trainer::step() const { return state_->step; }

const std::vector<StepRecord>& Trainer::history() const { return state_->history; }

kernels::AttentionStats Trainer::attention_stats() const {
  return state_->plans.attention->stats();
}

std::vector<float> Trainer::gather_parameters() {
  State& s = *state_;
  Tensor params, m, v;
  s.plans.parameters->gather_full(params, m, v);
  const Tensor global = parallel::gather_blocks(s.kernels, params.view(), s.global_specs, s.specs,
                                                s.mesh.axis(Axis::kTensor));
  std::vector<float> values(static_cast<size_t>(global.numel()));
  s.kernels.copy(TensorView::of(values.data(), global.numel()), global.view());
  return values;
}

fs::path Trainer::run_directory() const { return state_->run_dir; }

}  // namespace maxctx::train

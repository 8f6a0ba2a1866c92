#include "maxctx/train/trainer.h"

#include <algorithm>
#include <chrono>
#include <cmath>

#include "maxctx/core/check.h"
#include "maxctx/core/fault_injection.h"
#include "maxctx/core/log.h"
#include "maxctx/core/memory_check.h"
#include "maxctx/core/trace.h"
#include "maxctx/io/output_path.h"
#include "maxctx/kernels/host_transfer.h"
#include "maxctx/kernels/traced_kernels.h"
#include "maxctx/mesh/root_task.h"
#include "maxctx/model/activations.h"
#include "maxctx/model/llama.h"
#include "maxctx/model/llama_config.h"
#include "maxctx/model/memory_estimate.h"
#include "maxctx/model/remat.h"
#include "maxctx/model/weights.h"
#include "maxctx/parallel/expert_parallel.h"
#include "maxctx/parallel/load_balance.h"
#include "maxctx/parallel/parallelize.h"
#include "maxctx/parallel/tensor_parallel.h"
#include "maxctx/train/checkpoint.h"
#include "maxctx/train/checkpoint_shards.h"
#include "maxctx/train/data.h"
#include "maxctx/train/evaluation.h"
#include "maxctx/train/initial_state.h"
#include "maxctx/train/metrics.h"
#include "maxctx/train/optimizer.h"
#include "maxctx/train/profiler.h"
#include "maxctx/train/recall.h"
#include "maxctx/train/schedule.h"
#include "maxctx/train/text_data.h"
#include "maxctx/train/train_step.h"
#include "maxctx/train/training_axes.h"

namespace maxctx::train {
namespace {

namespace fs = std::filesystem;

// The mesh rules are parallelize's; what is checked here is the run's batch against them.
parallel::ParallelDims check_training_mesh(const Config& c, const Mesh& mesh) {
  return check_training_axes(c, parallel::ParallelDims::training(mesh));
}

fs::path run_directory_of(const Config& c) {
  const fs::path base =
      c.base_output_directory.empty() ? fs::path("runs") : fs::path(c.base_output_directory);
  return base / (c.run_name.empty() ? "maxctx_" + c.model_name : c.run_name);
}

// A symlink at the run directory or at a directory the run writes into would send its writes,
// truncations and deletions of partial checkpoints to wherever it points (issue #34 N7); refused
// unless the user says so. metrics.jsonl itself is opened with O_NOFOLLOW.
void refuse_symlinked_run_directory(const Config& c, const fs::path& run_dir) {
  if (c.allow_symlinked_run_directory) return;
  for (const fs::path& path :
       {run_dir, run_dir / "checkpoints", run_dir / "tensorboard", run_dir / "tokenized"}) {
    std::error_code absent;
    if (fs::is_symlink(fs::symlink_status(path, absent))) {
      fail(
          "'{}' is a symlink: the run would write, truncate and delete files where it points; "
          "give the real directory, or set allow_symlinked_run_directory=true",
          path.string());
    }
  }
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
  parallel::TrainingParallelPlans plans;        // attention, tensor reducer, sharded parameters
  model::LlamaWeights weights, gradients;
  model::LlamaActivations acts;
  std::unique_ptr<DataLoader> loader;
  std::unique_ptr<Evaluation> evaluation;  // null without eval_interval > 0
  Tensor accumulated;                      // gradient accumulation's f32 sum of the shard
  AdamWConfig adamw;
  LearningRateSchedule schedule;
  std::unique_ptr<MetricLogger> metrics;
  std::unique_ptr<StepProfiler> profiler;
  std::unique_ptr<CheckpointSaver> saver;
  int64_t last_staged_bytes = 0;
  fs::path run_dir;
  int64_t step = 0;
  std::vector<StepRecord> history;

  State(const Config& c, const Mesh& m, const kernels::Kernels& k)
      : config(c),
        mesh(m),
        kernels(c.profiler.empty() ? k : kernels::traced(k)),  // traced: a span per op
        axes(check_training_mesh(c, m)) {}

  const Communicator& batch_group() const {
    return mesh.group({Axis::kData, Axis::kFsdp, Axis::kContext, Axis::kExpert});
  }
  // Whether this rank's weight list is the whole model's (no tensor or expert split).
  bool holds_whole_model() const { return axes.tensor == 1 && axes.expert == 1; }
  // The unsharded tensors from this rank's blocks (tensor) and experts (expert); collective.
  // `local` itself when it is already the whole model (no second copy of it).
  Tensor global_of(Tensor local) const {
    if (holds_whole_model()) return local;
    Tensor global = parallel::gather_blocks(kernels, local.view(), global_specs, specs,
                                            mesh.axis(Axis::kTensor));
    parallel::gather_experts(global.view(), global_specs, specs, mesh.axis(Axis::kExpert));
    return global;
  }
  StepModel step_model() {
    return {model_config, weights,       gradients,
            plans,        batch_group(), config.derived.global_batch_size_to_train_on};
  }

  // Stages this rank's share of the state and hands it to the saver (written in the
  // background with async_checkpointing, committed once every rank's file is written).
  void save_checkpoint() {
    const trace::Span span("checkpoint", trace::Category::kIo);
    const parallel::ReplicaPosition position{mesh.coord(Axis::kData), mesh.coord(Axis::kTensor),
                                             mesh.coord(Axis::kExpert)};
    // Into the last save's buffer, once that save is written (a second save waits for the first).
    StagedSlices staged = stage_checkpoint_slices(kernels, specs, *plans.parameters, position,
                                                  saver->reusable_staging());
    last_staged_bytes = staged.size;
    CheckpointState state{step, loader->position(), format_config(config)};
    state.model = model_config;
    saver->save(state, std::move(staged));
  }
};

Trainer::Trainer(const Config& config, const Mesh& mesh, const kernels::Kernels& kernels)
    : state_(std::make_unique<State>(config, mesh, kernels)) {
  State& s = *state_;
  // The model may come from a checkpoint's config.json; the config then describes that model.
  s.model_config = training_model_config(s.config);
  s.config = with_model_dimensions(s.config, s.model_config);
  const Config& c = s.config;
  const int tp = static_cast<int>(s.axes.tensor);
  // Before any weight list or buffer is built: a run that cannot fit is one line, not bad_alloc.
  // The rank keeps a master shard of its weights: at least the whole model over every axis that
  // splits it (fsdp × context shard it, tensor and expert split blocks; replicated weights only
  // add to that), in double so that a huge config is a clear error, not an overflow.
  const double weight_shard = model::parameter_bytes(s.model_config) /
                              static_cast<double>(s.axes.parameter_shards() * tp * s.axes.expert);
  const model::MemoryEstimate memory = model::training_memory(
      s.model_config, c.derived.global_batch_size_to_train_on / s.axes.data_shards,
      context_shard_len(c.max_target_length, s.axes.context), tp, weight_shard);
  check_fits_in_memory(memory.bytes, mesh.world_size(), mesh.num_nodes(), "training",
                       memory.detail);
  s.global_specs = model::llama_weight_specs(s.model_config);
  s.specs = model::llama_weight_specs(
      s.model_config, tp, static_cast<int>(mesh.coord(Axis::kTensor)),
      static_cast<int>(s.axes.expert), static_cast<int>(mesh.coord(Axis::kExpert)));

  s.plans = parallel::parallelize_training(c, mesh, s.axes, s.kernels, &s.specs);
  s.weights = model::bind_weights(s.specs, s.plans.parameters->full_params());
  s.gradients = model::bind_weights(s.specs, s.plans.parameters->full_grads());

  const int64_t rows = c.derived.global_batch_size_to_train_on / s.axes.data_shards;
  const int64_t local_seq = context_shard_len(c.max_target_length, s.axes.context);
  s.acts = model::allocate_activations(s.kernels, s.model_config, rows, local_seq, tp,
                                       model::remat_policy_of(c), s.axes.context);
  s.adamw = adamw_config(c);
  s.schedule = learning_rate_schedule(c);
  s.run_dir = run_directory_of(c);
  refuse_symlinked_run_directory(c, s.run_dir);
  // Everything the run writes, checked before its starting state is read or data tokenized.
  run_on_root(mesh.world(), [&] {
    const std::string what = "the run directory (base_output_directory/run_name)";
    io::check_output_directory(s.run_dir, what);
    for (const char* sub : {"checkpoints", "tensorboard", "tokenized"}) {
      io::expect_directory_or_absent(s.run_dir / sub, what + "'s " + sub);
    }
    io::check_output_file(s.run_dir / "metrics.jsonl", "the run's metrics file");
    if (!c.profiler.empty()) io::check_output_file(s.run_dir / "trace.json", "the run's trace");
  });

  DataShard shard;
  shard.global_batch_rows = c.derived.global_batch_size_to_train_on;
  shard.data_shards = s.axes.data_shards;
  shard.data_rank = s.axes.data_rank;
  shard.cp = s.axes.context;
  shard.cp_rank = mesh.coord(Axis::kContext);
  shard.load_balance = c.context_parallel_load_balance;

  // The run's own checkpoint, else load_full_state_path / load_parameters_path, else the
  // counter-based initialisation; each rank reads (or generates) only its own shard, so every
  // mesh starts from the same values and no rank holds the whole model.
  StartingState start =
      load_starting_state(c, s.run_dir, s.model_config, s.global_specs, mesh.world());
  s.step = start.step;
  log::info("{}", start.source);
  if (start.tensors) {
    run_on_every_rank(mesh.world(), [&] {
      restore_shard(s.kernels, *start.tensors, s.specs, *s.plans.parameters, start.with_moments);
    });
  } else {
    const auto seed = static_cast<uint64_t>(c.init_weights_seed);
    s.plans.parameters->initialise_shard([&](int64_t begin, std::span<float> out) {
      model::init_weight_range(s.specs, begin, out, seed);
    });
  }
  start.tensors.reset();  // the files are closed before the first step
  std::shared_ptr<const DataSource> source;
  if (dataset_type(c) == DatasetType::kHf) {
    source = open_text_source(text_corpus_from(c, false), s.run_dir / "tokenized", "train", c,
                              c.enable_data_shuffling, shard.global_batch_rows, mesh.world())
                 .source;
  } else {
    source = make_data_source(c);
  }
  s.loader = std::make_unique<DataLoader>(source, shard, start.data_position);
  if (c.eval_interval > 0) {
    s.evaluation =
        std::make_unique<Evaluation>(c, mesh, s.axes, s.run_dir, s.model_config, s.kernels);
  }

  // Checks the profiler keys before anything is written in the run directory.
  s.profiler = std::make_unique<StepProfiler>(c, mesh.world(), s.run_dir / "trace.json", s.step);
  MetricLoggerOptions options;
  options.jsonl_path = (s.run_dir / "metrics.jsonl").string();
  options.run_name = s.run_dir.filename().string();
  options.total_steps = c.steps;
  options.tflops_per_device =
      training_tflops_per_device(flops_model(c), c.per_device_batch_size, c.max_target_length,
                                 c.gradient_accumulation_steps)
          .total;
  options.tokens_per_device = training_tokens_per_device(
      c.per_device_batch_size, c.max_target_length, c.gradient_accumulation_steps);
  options.flush_period = c.log_period;
  if (start.resumed) options.resumed_at_step = start.step;  // earlier steps' metrics stay
  if (c.enable_tensorboard) options.tensorboard_dir = (s.run_dir / "tensorboard").string();
  // Rank 0 creates the run directory and the metrics file; every rank learns whether it could.
  run_on_root(mesh.world(), [&] {
    fs::create_directories(s.run_dir);
    s.metrics = std::make_unique<MetricLogger>(options);
  });
  if (!s.metrics) s.metrics = std::make_unique<MetricLogger>(options);  // ranks > 0: no file
  // The metrics of the steps a checkpoint covers reach the disk before it is committed: a kill
  // after the commit loses no logged step. Old checkpoints go only once the new one is complete.
  s.saver = std::make_unique<CheckpointSaver>(
      mesh.world(),
      CheckpointSaver::Options{s.run_dir, c.async_checkpointing, c.max_num_checkpoints_to_keep},
      [&s] { s.metrics->flush(); });
  log::info("model: {} parameters; data: {}; mesh: {}", s.model_config.num_parameters(),
            s.loader->source().describe(), s.axes.text());
}

Trainer::~Trainer() = default;

void Trainer::run(int64_t max_new_steps) {
  State& s = *state_;
  const Config& c = s.config;
  const int64_t last = max_new_steps < 0 ? c.steps : std::min(c.steps, s.step + max_new_steps);
  auto previous = std::chrono::steady_clock::now();
  while (s.step < last) {
    inject_step_faults(s.step);
    s.profiler->before_step(s.step);
    s.kernels.allocator().reset_peak();  // a device's peak committed memory is per step
    const std::optional<kernels::TransferCounts> transfers_before = s.kernels.transfer_counts();
    trace::Span step_span("step", trace::Category::kStep, nullptr);
    std::vector<Batch> micro_batches;
    for (int64_t k = 0; k < c.gradient_accumulation_steps; ++k) {
      const trace::Span span("next_batch", trace::Category::kData);
      micro_batches.push_back(s.loader->next());
    }
    const StepSums sums = forward_backward(s.step_model(), micro_batches, s.acts, s.accumulated);
    trace::Span optimizer_span("optimizer", trace::Category::kOptimizer);
    const double raw_norm = s.plans.parameters->global_grad_norm();
    clip_by_global_norm(s.kernels, s.plans.parameters->grad_shard(), raw_norm,
                        c.gradient_clipping_threshold);
    const double learning_rate = learning_rate_at(s.schedule, s.step);
    adamw_update(s.kernels, s.adamw, s.step + 1, static_cast<float>(learning_rate),
                 s.plans.parameters->master(), s.plans.parameters->grad_shard(),
                 s.plans.parameters->adam_m(), s.plans.parameters->adam_v());
    optimizer_span.finish();
    // The step's readbacks and waits on a device backend (Kernels::transfer_counts): one per
    // micro-batch (its loss sums) and one for the gradient norm.
    std::optional<kernels::TransferCounts> step_transfers;
    if (transfers_before) step_transfers = *s.kernels.transfer_counts() - *transfers_before;

    StepRecord record;
    record.step = s.step;
    record.moe_lb_loss = sums.moe_lb_loss;
    record.moe_dropped = sums.moe_dropped;
    record.loss = sums.loss();
    record.grad_norm = raw_norm;
    record.accuracy = sums.accuracy();
    record.total_weights = static_cast<int64_t>(sums.weight_sum);
    ++s.step;
    // The step's time stops here: an evaluation is timed apart from it.
    const auto now = std::chrono::steady_clock::now();
    auto eval_elapsed = std::chrono::steady_clock::duration::zero();
    if (s.evaluation && s.step % c.eval_interval == 0) {
      const StepSums eval = s.evaluation->run(s.step_model());
      eval_elapsed = std::chrono::steady_clock::now() - now;
      record.eval_seconds = std::chrono::duration<double>(eval_elapsed).count();
      record.evaluated = true;
      record.eval_loss = eval.loss();
      record.eval_perplexity = std::exp(record.eval_loss);
      record.eval_weights = static_cast<int64_t>(eval.weight_sum);
      record.eval_accuracy = eval.accuracy();
      log::info(
          "eval metrics after step: {}, loss={:.3f}, perplexity={:.3f}, total_weights={}, "
          "seconds={:.3f}",
          record.step, record.eval_loss, record.eval_perplexity, record.eval_weights,
          record.eval_seconds);
    }
    s.history.push_back(record);

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
    // On a device backend: the most device memory this rank held committed in the step
    // (Allocator::committed_bytes; the host does not count its pages).
    if (const std::optional<CommittedBytes> device = s.kernels.allocator().committed_bytes()) {
      metrics.extra.push_back({"perf/device_memory_peak_bytes", static_cast<double>(device->peak)});
    }
    if (step_transfers) {
      metrics.extra.push_back(
          {"perf/device_readbacks", static_cast<double>(step_transfers->readbacks)});
      metrics.extra.push_back(
          {"perf/device_host_waits", static_cast<double>(step_transfers->host_waits)});
      if (step_transfers->offloads > 0) {  // remat_policy=custom's copies to host memory
        metrics.extra.push_back(
            {"perf/device_offloads", static_cast<double>(step_transfers->offloads)});
      }
    }
    if (s.model_config.moe) {
      metrics.extra.push_back({"learning/lm_loss", record.loss - record.moe_lb_loss});
      metrics.extra.push_back({"learning/moe_lb_loss", record.moe_lb_loss});
      if (!s.model_config.sparse_matmul && s.model_config.capacity_factor > 0) {
        metrics.extra.push_back(
            {"learning/moe_dropped_choices", static_cast<double>(record.moe_dropped)});
      }
    }
    if (record.evaluated) {
      metrics.extra.push_back({"eval/avg_loss", record.eval_loss});
      metrics.extra.push_back({"eval/avg_perplexity", record.eval_perplexity});
      metrics.extra.push_back({"eval/total_loss", record.eval_loss * record.eval_weights});
      metrics.extra.push_back({"eval/total_weights", static_cast<double>(record.eval_weights)});
      metrics.extra.push_back({"eval/accuracy", record.eval_accuracy});
      metrics.extra.push_back({"perf/eval_seconds", record.eval_seconds});
    }
    run_on_root(s.mesh.world(), [&] { s.metrics->log_step(metrics); });
    previous = now + eval_elapsed;
    if (c.enable_checkpointing && (s.step % c.checkpoint_period == 0 || s.step == c.steps)) {
      s.save_checkpoint();
    } else {
      s.saver->poll();  // commits a background save once every rank has written its part
    }
    step_span.finish();
    s.profiler->after_step(record.step);
  }
  s.saver->finish();
  if (s.step == c.steps) s.profiler->finish();  // a run ending inside the window
  run_on_root(s.mesh.world(), [&] { s.metrics->flush(); });
}

int64_t Trainer::step() const { return state_->step; }

const std::vector<StepRecord>& Trainer::history() const { return state_->history; }

kernels::AttentionStats Trainer::attention_stats() const {
  return state_->plans.attention->stats();
}

Trainer::GatheredState Trainer::gather_state() {
  State& s = *state_;
  Tensor params, m, v;
  s.plans.parameters->gather_full(params, m, v);
  GatheredState out;
  out.params = kernels::download_floats(s.kernels, s.global_of(std::move(params)).view());
  out.adam_m = kernels::download_floats(s.kernels, s.global_of(std::move(m)).view());
  out.adam_v = kernels::download_floats(s.kernels, s.global_of(std::move(v)).view());
  return out;
}

int64_t Trainer::last_checkpoint_staged_bytes() const { return state_->last_staged_bytes; }

std::vector<float> Trainer::gather_parameters() {
  State& s = *state_;
  Tensor params, m, v;
  s.plans.parameters->gather_full(params, m, v);
  const Tensor global = s.global_of(std::move(params));
  std::vector<float> values = kernels::download_floats(s.kernels, global.view());
  return values;
}

fs::path Trainer::run_directory() const { return state_->run_dir; }

void Trainer::track_parameter_memory() { state_->plans.parameters->track_unit_memory(); }

AllocatedMemory Trainer::allocated_memory() const {
  const State& s = *state_;
  return {s.plans.parameters->memory_use().shard_bytes, model::allocated_bytes(s.acts),
          s.plans.attention->held_bytes()};
}

ParameterMemory Trainer::parameter_memory() const {
  const auto use = state_->plans.parameters->memory_use();
  return {use.shard_bytes, use.peak_unit_bytes};
}

}  // namespace maxctx::train

#include "maxctx/train/evaluation.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "maxctx/core/check.h"
#include "maxctx/core/log.h"
#include "maxctx/parallel/load_balance.h"
#include "maxctx/train/text_data.h"

namespace maxctx::train {
namespace {

int64_t eval_global_rows(const Config& c, const parallel::ParallelDims& axes) {
  const double per_device =
      c.eval_per_device_batch_size > 0 ? c.eval_per_device_batch_size : c.per_device_batch_size;
  const double rows = per_device * static_cast<double>(c.derived.num_devices);
  if (!(per_device > 0) || std::fabs(rows - std::round(rows)) > 1e-9 || std::round(rows) < 1) {
    fail(
        "the eval batch of eval_per_device_batch_size {} x {} devices is not a whole number of "
        "sequences",
        per_device, c.derived.num_devices);
  }
  const auto global = static_cast<int64_t>(std::round(rows));
  if (global % axes.data_shards != 0) {
    fail(
        "the eval batch of {} sequences does not split over data x fsdp = {}; make "
        "eval_per_device_batch_size x devices a multiple of {}",
        global, axes.data_shards, axes.data_shards);
  }
  return global;
}

}  // namespace

Evaluation::Evaluation(const Config& c, const Mesh& mesh, const parallel::ParallelDims& axes,
                       const std::filesystem::path& run_dir, const model::LlamaConfig& model,
                       const kernels::Kernels& kernels)
    : global_rows_(eval_global_rows(c, axes)),
      rows_per_shard_(global_rows_ / axes.data_shards),
      data_rank_(axes.data_rank),
      cp_(axes.context),
      cp_rank_(mesh.coord(Axis::kContext)),
      load_balance_(c.context_parallel_load_balance),
      eval_steps_(c.eval_steps) {
  if (dataset_type(c) == DatasetType::kHf) {
    if (c.hf_eval_files.empty()) {
      fail("eval_interval = {} needs hf_eval_files (the evaluation files) with dataset_type=hf",
           c.eval_interval);
    }
    const TextSource text =
        open_text_source(text_corpus_from(c, true), run_dir / "tokenized", "eval", c,
                         /*shuffle=*/false, global_rows_, mesh.world());
    set_rows_ = text.rows_per_epoch;
    source_ = text.source;
  } else if (dataset_type(c) == DatasetType::kRecall ||
             dataset_type(c) == DatasetType::kSynthetic) {
    Config held_out = c;
    held_out.data_shuffle_seed = c.data_shuffle_seed + 1;
    source_ = make_data_source(held_out);
    if (c.eval_steps <= 0) {
      fail("eval_steps = {}: generated {} data has no end; set eval_steps > 0", c.eval_steps,
           c.dataset_type);
    }
  } else {
    fail(
        "eval_interval = {}: dataset_type = {} has no eval set; use dataset_type=hf with "
        "hf_eval_files (or recall / synthetic)",
        c.eval_interval, c.dataset_type);
  }
  batches_ = c.eval_steps > 0 ? c.eval_steps : (set_rows_ + global_rows_ - 1) / global_rows_;
  acts_ = model::allocate_activations(kernels, model, rows_per_shard_,
                                      context_shard_len(c.max_target_length, cp_),
                                      static_cast<int>(axes.tensor), {}, cp_);
  log::info("eval: {} batches of {} rows every {} steps from {}", batches_, global_rows_,
            c.eval_interval, source_->describe());
}

StepSums Evaluation::run(const StepModel& model) {
  return evaluate(
      model, batches_, [this](int64_t b) { return read_batch(b); }, acts_);
}

Batch Evaluation::read_batch(int64_t b) const {
  const bool whole_set = set_rows_ > 0 && eval_steps_ <= 0;
  const int64_t first = b * global_rows_ + data_rank_ * rows_per_shard_;
  Batch batch = source_->read(first, rows_per_shard_, cp_, cp_rank_, load_balance_);
  const int64_t columns = batch.seq_len;
  for (int64_t r = 0; r < rows_per_shard_ && whole_set; ++r) {
    if (first + r < set_rows_) continue;
    // Past the end of the set (the last batch of one pass): an unscored padding row.
    for (std::vector<int32_t>* array : {&batch.tokens, &batch.targets, &batch.positions,
                                        &batch.segment_ids, &batch.target_segment_ids}) {
      std::fill_n(array->begin() + r * columns, columns, 0);
    }
  }
  return batch;
}

}  // namespace maxctx::train

// Evaluation during training (MaxText's eval_interval / eval_steps): every eval_interval steps,
// the loss over eval batches with the current parameters, forward only.
//
// The eval set: dataset_type=hf reads hf_eval_files (eval_data_columns), tokenized and packed as
// the training files are but never shuffled; recall and synthetic data draw their eval rows from
// the same generator with seed data_shuffle_seed + 1 (rows training never sees); token files have
// no eval key (an error). An evaluation reads eval_steps batches from the set's first row
// (wrapping round a small set), or, with eval_steps <= 0, the whole set once (MaxText's default
// -1), the last batch padded with unscored rows. An eval batch holds eval_per_device_batch_size
// (0: per_device_batch_size) × devices rows, split over the mesh as training's are; the sums are
// over the whole job, so every mesh reports the same loss.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>

#include "maxctx/config/config.h"
#include "maxctx/kernels/kernels.h"
#include "maxctx/mesh/mesh.h"
#include "maxctx/model/activations.h"
#include "maxctx/parallel/parallelize.h"
#include "maxctx/train/data.h"
#include "maxctx/train/train_step.h"

namespace maxctx::train {

class Evaluation {
 public:
  // maxctx::Error (naming the keys) when the config has no eval set or the eval batch does not
  // split over the mesh. Collective (rank 0 tokenizes hf eval files).
  Evaluation(const Config& config, const Mesh& mesh, const parallel::ParallelDims& axes,
             const std::filesystem::path& run_dir, const model::LlamaConfig& model,
             const kernels::Kernels& kernels);

  // Sums over the eval batches of one evaluation. Collective.
  StepSums run(const StepModel& model);
  int64_t batches() const { return batches_; }

 private:
  // This rank's share of eval batch `b` of an evaluation.
  Batch read_batch(int64_t b) const;

  std::shared_ptr<const DataSource> source_;
  int64_t set_rows_ = -1;    // rows of one pass over the set; -1: unbounded (generated data)
  int64_t global_rows_ = 0;  // rows of one eval batch over the job
  int64_t rows_per_shard_ = 0;
  int64_t data_rank_ = 0;
  int64_t cp_ = 1, cp_rank_ = 0;
  bool load_balance_ = true;
  int64_t eval_steps_ = -1;
  int64_t batches_ = 0;
  model::LlamaActivations acts_;
};

}  // namespace maxctx::train

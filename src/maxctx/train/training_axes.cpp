#include "maxctx/train/training_axes.h"

#include "maxctx/core/check.h"
#include "maxctx/parallel/load_balance.h"

namespace maxctx::train {

parallel::ParallelDims check_training_axes(const Config& c, parallel::ParallelDims t) {
  const int64_t batch = c.derived.global_batch_size_to_train_on;
  if (batch % t.data_shards != 0) {
    fail(
        "the global batch of {} sequences (per_device_batch_size {} x {} devices) does not "
        "split over data x fsdp x expert = {} x {} x {}; make it a multiple of {}",
        batch, c.per_device_batch_size, c.derived.num_devices, t.data, t.fsdp, t.expert,
        t.data_shards);
  }
  validate_batch(c, t.context);
  check_context_split(c.max_target_length, t.context, c.context_parallel_load_balance);
  return t;
}

AxisArray axis_sizes_of(const Config& c) { return parallel::planned_mesh_shape(c).axis_sizes(); }

}  // namespace maxctx::train

// The trainer's checks of a config against its training axes, shared by the trainer and the
// planner (plan/step_plan.h), which must refuse exactly what the trainer refuses.
#pragma once

#include "maxctx/config/config.h"
#include "maxctx/mesh/mesh_shape.h"
#include "maxctx/parallel/parallelize.h"

namespace maxctx::train {

// The trainer's checks of a config on its training axes (data × fsdp split of the batch,
// fractional batch only under context, S splittable over context): maxctx::Error naming keys.
parallel::ParallelDims check_training_axes(const Config& config, parallel::ParallelDims dims);

// The axis sizes of a resolved config (ici × dcn per axis, axis.h order).
AxisArray axis_sizes_of(const Config& config);

}  // namespace maxctx::train

// The trainer's side of a sharded checkpoint: the parts of this rank's fsdp shard that it saves,
// copied out for the writer, and this rank's shard read back from any checkpoint (whatever mesh
// saved it) or from a Hugging Face directory. A rank reads and writes only its own shard's bytes:
// memory for a save or a restore is this rank's share, never the model.
//
// Which copy of a replicated weight is saved is parallel::saves_copy's decision and where a
// shard's elements sit in the tensors is parallel::flat_slices'; nothing here knows a mesh axis.
#pragma once

#include <cstdint>
#include <vector>

#include "maxctx/io/sliced_tensors.h"
#include "maxctx/kernels/kernels.h"
#include "maxctx/model/weights.h"
#include "maxctx/parallel/sharded_parameters.h"
#include "maxctx/parallel/weight_sharding.h"
#include "maxctx/train/checkpoint.h"

namespace maxctx::train {

// This rank's share of a checkpoint: the parts of its shard of each weight whose copy it saves,
// weights and both moments (weight_dtype), copied to host memory in one buffer.
// `reuse`: a buffer of an earlier save (CheckpointSaver::reusable_staging), taken when large
// enough.
StagedSlices stage_checkpoint_slices(const kernels::Kernels& kernels,
                                     const std::vector<model::WeightSpec>& specs,
                                     const parallel::ShardedParameters& parameters,
                                     const parallel::ReplicaPosition& position,
                                     StagedSlices reuse = {});
// The bytes stage_checkpoint_slices copies for these units (`maxctx plan`).
int64_t staged_checkpoint_bytes(const std::vector<model::WeightSpec>& specs,
                                const std::vector<parallel::ShardedParameters::Unit>& units,
                                const parallel::ReplicaPosition& position, DType weight_dtype);

// Reads this rank's shard from `tensors` (global names and shapes: a checkpoint or a Hugging
// Face directory): the weights, and both moments when `with_moments` (else they are zeroed),
// converting dtype where the file's differs; every value read is checked finite (NaN or Inf is
// an error naming the tensor). On the cpu backend the bytes land in the shard itself; elsewhere
// through one host buffer of one slice.
void restore_shard(const kernels::Kernels& kernels, const io::SliceReader& tensors,
                   const std::vector<model::WeightSpec>& specs,
                   parallel::ShardedParameters& parameters, bool with_moments);

}  // namespace maxctx::train

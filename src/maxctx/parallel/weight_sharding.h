// The weight list as parallelism sees it, and the one place that decides how each weight is
// split over the `tensor` axis (Megatron): the model declares each tensor with its global shape
// and its role (model/weights.h llama_weight_decls), and shard_weights turns that declaration
// into this tensor rank's blocks. ShardedParameters (fsdp), the gradient sync, the checkpoint
// gather and tensor_parallel's block copies all read the WeightSpec list this returns; nothing
// in the model names a split.
//
// Layout of the flat buffer: the declarations' order, each tensor's local block contiguous.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace maxctx::parallel {

// How tensor parallelism (Megatron) splits a weight over the `tensor` axis.
enum class TensorSplit {
  kReplicated,  // every rank holds all of it (norms, embedding, lm_head)
  kRows,        // output dim split: column-parallel q, k, v, gate, up
  kCols,        // input dim split: row-parallel o, down (outputs all-reduced)
};

// What a weight is to the model; tensor_split_of (below) decides how it is sharded.
enum class WeightRole {
  kNorm,           // RMSNorm scales
  kEmbedding,      // token embedding table (V, E)
  kOutputHead,     // lm_head (V, E)
  kHeadsOrHidden,  // q, k, v, gate, up: output features are heads or hidden units
  kIntoResidual,   // o, down: input features are heads or hidden units, output the stream
  kRouter,         // a mixture of experts' router (num_experts, E): one logit per expert
};

enum class WeightInit {
  kOnes,        // RMSNorm scales
  kFanInNormal  // N(0, 1/in_dim): MaxText's variance scaling for dense kernels and embeddings
};

struct WeightSpec {
  std::string name;     // Hugging Face name, e.g. "model.layers.0.self_attn.q_proj.weight"
  int layer;            // decoder layer, or -1 for embedding, final norm and head
  int64_t rows;         // local (this tensor-parallel rank's) shape; rows = out_dim
  int64_t cols;         // 1 for vectors
  int64_t global_rows;  // the unsharded shape
  int64_t global_cols;
  int64_t row_offset;  // where this rank's block starts in the unsharded tensor
  int64_t col_offset;
  WeightRole role;
  TensorSplit split;
  WeightInit init;
  int64_t offset;  // first element in the flat buffer
  // A mixture of experts' expert weights: the expert's index (else -1). Under the expert axis a
  // rank holds only its experts' blocks; another rank's expert keeps its spec with rows = 0
  // (no elements), so every rank's list names the same tensors in the same order.
  int64_t expert = -1;

  int64_t numel() const { return rows * cols; }
  bool expert_weight() const { return expert >= 0; }
};

// How tensor parallelism splits a weight of this role (the per-weight rule, in one place).
TensorSplit tensor_split_of(WeightRole role);

// One weight as the model declares it: unsharded shape, role, initialisation.
struct WeightDecl {
  std::string name;  // Hugging Face name
  int layer;         // decoder layer, or -1
  int64_t rows;      // out_dim (the unsharded shape)
  int64_t cols;      // in_dim; 1 for vectors
  WeightRole role;
  WeightInit init;
  int64_t expert = -1;  // the expert of an expert's projection, else -1
};

// This tensor rank's blocks of every declared weight, laid out in one flat buffer. Over the
// expert axis (ep_size ranks) the experts are split in contiguous groups of
// num_experts / ep_size: expert rank r holds experts [r·n, (r+1)·n) (MaxText's expert-sharded
// weights), the others' specs are empty. The non-expert weights are the same on every expert
// rank, so their offsets are too.
std::vector<WeightSpec> shard_weights(const std::vector<WeightDecl>& decls, int tp_size,
                                      int tp_rank, int ep_size = 1, int ep_rank = 0);
// The experts expert rank `ep_rank` of `ep_size` holds: [first, first + count).
struct ExpertRange {
  int64_t first = 0;
  int64_t count = 0;
  bool holds(int64_t expert) const { return expert >= first && expert < first + count; }
};
ExpertRange local_experts(int64_t num_experts, int ep_size, int ep_rank);

int64_t total_numel(const std::vector<WeightSpec>& specs);
// Elements [begin, end) of the flat buffer that hold decoder layer `layer` (-1: the rest is not
// contiguous, so only layers are asked for).
struct FlatRange {
  int64_t begin;
  int64_t end;
};
FlatRange layer_range(const std::vector<WeightSpec>& specs, int layer);
// The weight units in the model's order of use, each contiguous in the flat buffer:
// [embedding, layer 0, ..., layer L-1, final norm + lm_head]. fsdp shards unit by unit.
std::vector<FlatRange> weight_units(const std::vector<WeightSpec>& specs);

// Part of one weight tensor that is contiguous in a flat buffer: rows x cols elements of the
// unsharded tensor from (row, col), row-major from flat element `flat_begin`. What sharded
// checkpoints store and read: any flat range maps to such parts, whatever the tensor split.
struct FlatSlice {
  int spec;  // index in the spec list
  int64_t row, col;
  int64_t rows, cols;
  int64_t flat_begin;
  int64_t numel() const { return rows * cols; }
};
// The parts of the tensors that elements [begin, end) of the flat buffer laid out by `specs`
// hold, in flat order: per tensor at most three (a partial first row of its block, whole rows,
// a partial last row).
std::vector<FlatSlice> flat_slices(const std::vector<WeightSpec>& specs, int64_t begin,
                                   int64_t end);

// Where a rank sits among the copies of the weights, for deciding which copy a checkpoint
// saves: every element is written by exactly one rank. Copies over data are the same, as are a
// replicated tensor's over `tensor` and the non-expert weights over `expert` (fsdp and context
// split the weights: parallelize.h's kParameterShardAxes).
struct ReplicaPosition {
  int64_t data = 0, tensor = 0, expert = 0;  // this rank's mesh coordinates
};
// Whether the rank at `at` saves its copy of `spec` (of its fsdp shard of it).
bool saves_copy(const WeightSpec& spec, const ReplicaPosition& at);

}  // namespace maxctx::parallel

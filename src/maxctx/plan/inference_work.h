// What one rank computes in a prefill and in a decode step, kernel family by kernel family, for
// the inference plan's times (inference_plan.h), as plan/step_work.h does for a training step:
// every weight this rank holds as a matmul at the shape the forward runs it (read from the
// weight list the loader allocates), attention's FLOPs, and the element counts of the forward's
// vector kernels. A hardware profile turns each into seconds: its measured tables where it has
// them (probe-hardware), else the bytes each kernel streams over the memory bandwidth.
//
// Kinds name HardwareProfile table entries: a prefill matmul runs at "int8" (quantization=int8)
// or the dtype's rate by its smallest dimension; a decode matmul at "<kind>_decode" by its
// weight's smaller dimension (the table is measured on 4 rows); prefill attention at
// "<dtype>_forward" and decode attention at "<int8 | dtype>_decode" (the cache's), both by
// head_dim.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "maxctx/infer/engine.h"
#include "maxctx/mesh/traffic.h"
#include "maxctx/model/llama_config.h"
#include "maxctx/model/weights.h"

namespace maxctx::plan {

struct InferenceMatmul {
  int64_t rows = 0, inner = 0, cols = 0;  // (rows, inner) x (inner, cols), once per call
  std::string kind;                       // matmul_by_size kind
  double weight_bytes = 0;                // as stored (int8 codes + scales, or weight_dtype)
  int64_t smallest() const;               // the size a rate table is read at (see the kinds above)
  double flops() const { return 2.0 * double(rows) * double(inner) * double(cols); }
  // What the time is reckoned on: a decode matmul costs at least what 4 rows cost (the weights
  // are read once per 4 rows, the int8 tile's token count), so its FLOPs count max(rows, 4).
  double timed_flops() const;
};

struct InferenceVectorWork {
  std::string op;                // HardwareProfile::vector_rates key
  double elements = 0;           // per call of the stage
  double bytes_per_element = 0;  // read + written (the memory fallback)
  double calls = 0;              // kernel calls, for HardwareProfile::call_seconds (0: not counted)
};

struct StageWork {
  std::vector<InferenceMatmul> matmuls;
  std::string attention_kind;  // attention_by_head_dim kind
  double attention_flops = 0;  // QKᵀ and PV, causal for a prefill (MaxText's count)
  double attention_bytes = 0;  // K and V read (the memory fallback)
  int64_t head_dim = 0;
  std::vector<InferenceVectorWork> vectors;
  // The collectives (over context_autoregressive, expert and their group), as the engine calls
  // them.
  Traffic traffic;
};

// How a rank's inference is laid out: its expert group's slots over `ca` ranks, `expert` groups,
// and the trace names of the axes its collectives use.
struct InferenceLayout {
  int64_t ca = 1, expert = 1;
  int64_t group_slots = 1;   // the decode slots of this rank's expert group
  int64_t expert_ranks = 1;  // ranks the experts split over (expert x ca, or 1: all on each)
  std::string ca_axis, expert_axis, expert_group_axis;
};

// Whether quantization=int8 gives this weight an int8 copy (model/inference.h: every
// projection, a mixture's experts, and the head; not the embedding, norms or router).
bool int8_quantized(const model::WeightSpec& s);
// A dense MLP projection or the head: the rows a sequence-sharded decode splits over ca.
bool decode_row_split(const model::WeightSpec& s, const model::LlamaConfig& m);
// `rows` of the weight as the engine stores them: int8 codes and scales, or weight_dtype.
int64_t stored_weight_bytes(const model::WeightSpec& s, int64_t rows, bool int8,
                            DType weight_dtype);

// The forward's vector kernels these count, as probe-hardware measures them (vector_rates).
const std::vector<std::string>& inference_vector_ops();

// A prefill of every slot's `length`-token prompt (this rank's 1/ca of each of its group's
// slots) and a decode step at full length (max_target_length, this rank's cache rows), for the
// weights `specs` this rank holds (infer::inference_weight_specs).
StageWork prefill_work(const model::LlamaConfig& m, const infer::InferenceSettings& s,
                       const InferenceLayout& layout, const std::vector<model::WeightSpec>& specs,
                       int64_t length);
StageWork decode_work(const model::LlamaConfig& m, const infer::InferenceSettings& s,
                      const InferenceLayout& layout, const std::vector<model::WeightSpec>& specs);

}  // namespace maxctx::plan

// What one rank's training step computes, kernel family by kernel family, for the plan's step
// time (step_plan.h): every weight's matmuls at the shapes the layers run them (read from the
// weight list the trainer allocates, so a new weight cannot be left out), the attention FLOPs
// and the element counts of the vector kernels (norms, SwiGLU, RoPE, residual adds, the loss,
// the embedding, AdamW and the gradient norm). A hardware profile turns each into seconds.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "maxctx/model/llama_config.h"
#include "maxctx/model/remat.h"

namespace maxctx::plan {

struct MatmulWork {
  int64_t rows = 0, inner = 0, cols = 0;  // (rows, inner) x (inner, cols) per call
  int64_t calls = 0;                      // per step: one forward and one backward per micro-batch
  int64_t recomputed_calls = 0;           // forwards the remat policy runs again in the backward
  int64_t smallest() const;
  double forward_flops() const;     // per step, recomputation included
  double recomputed_flops() const;  // per step, the recomputation alone
  double backward_flops() const;    // per step: input and weight gradients, twice a forward
};

struct VectorWork {
  std::string op;                // HardwareProfile::vector_rates key
  double elements = 0;           // per step
  double bytes_per_element = 0;  // read + written, forward + backward (the memory fallback)
};

struct StepWork {
  std::vector<MatmulWork> matmuls;
  int64_t head_dim = 0;  // attention's, for its rate
  std::vector<VectorWork> vectors;
};

// The vector kernels StepWork counts, in the order probe-hardware measures them.
const std::vector<std::string>& training_vector_ops();

// Where one rank's micro-batch sits in the mesh.
struct StepShape {
  int64_t rows = 0;       // sequences
  int64_t local_seq = 0;  // tokens of each here
  int tensor = 1;         // ranks the heads and hidden units are split over
  int expert = 1;         // ranks a mixture's experts are split over (each runs its experts'
                          // rows from all of them)
  int64_t context = 1;    // ranks each sequence is split over
};

// One rank's step: `micro_batches` micro-batches of `shape`, `parameter_shard` AdamW elements,
// and whether gradient clipping is on.
StepWork training_step_work(const model::LlamaConfig& m, const model::RematPolicy& remat,
                            const StepShape& shape, int64_t micro_batches, int64_t parameter_shard,
                            bool clipping);

}  // namespace maxctx::plan

#include "maxctx/plan/step_work.h"

#include <algorithm>

#include "maxctx/model/activations.h"
#include "maxctx/model/moe_block.h"
#include "maxctx/model/weights.h"

namespace maxctx::plan {
namespace {

using parallel::WeightRole;

bool named(const model::WeightSpec& s, const char* part) {
  return s.name.find(part) != std::string::npos;
}

// Whether the remat policy runs this weight's forward matmul again in the backward
// (model/remat.h; the experts', the router's and the head's never are).
bool recomputed(const model::WeightSpec& s, const model::RematPolicy& remat,
                const model::LlamaConfig& m) {
  if (remat.save_all || s.layer < 0 || s.expert_weight()) return false;
  if (named(s, "q_proj") || named(s, "k_proj") || named(s, "v_proj")) return !remat.qkv;
  if (named(s, "o_proj")) return !remat.out_proj;
  if (named(s, "gate_proj") || named(s, "up_proj")) return !remat.mlpwi && !m.moe;
  return false;
}

// The rows each of this rank's experts runs per micro-batch: the dispatch's rows split over the
// experts (sparse dispatch: the N·K routed rows at their mean, as routing decides the split;
// dense: every expert's capacity slots per sequence), from each rank of the expert axis.
int64_t rows_per_expert(const model::LlamaConfig& m, const StepShape& x) {
  return model::moe_dispatch_rows(m, x.rows, x.local_seq, x.context) / m.num_experts * x.expert;
}

}  // namespace

int64_t MatmulWork::smallest() const { return std::min({rows, inner, cols}); }

double MatmulWork::forward_flops() const {
  return 2.0 * double(rows) * double(inner) * double(cols) * double(calls + recomputed_calls);
}

double MatmulWork::recomputed_flops() const {
  return 2.0 * double(rows) * double(inner) * double(cols) * double(recomputed_calls);
}

double MatmulWork::backward_flops() const {
  return 4.0 * double(rows) * double(inner) * double(cols) * double(calls);
}

const std::vector<std::string>& training_vector_ops() {
  static const std::vector<std::string> ops = {
      "rmsnorm",       "swiglu",   "rope",  "residual_add", "embedding",
      "cross_entropy", "accuracy", "adamw", "grad_norm",    "grad_clip"};
  return ops;
}

StepWork training_step_work(const model::LlamaConfig& m, const model::RematPolicy& remat,
                            const StepShape& x, int64_t micro_batches, int64_t parameter_shard,
                            bool clipping) {
  StepWork w;
  w.head_dim = m.head_dim;
  const int tensor = x.tensor;
  const int64_t N = x.rows * x.local_seq;  // tokens per micro-batch
  for (const model::WeightSpec& s : model::llama_weight_specs(m, tensor, 0, x.expert, 0)) {
    const bool head =
        s.role == WeightRole::kOutputHead || (s.role == WeightRole::kEmbedding && m.tie_embeddings);
    const bool matmul = head || s.role == WeightRole::kHeadsOrHidden ||
                        s.role == WeightRole::kIntoResidual || s.role == WeightRole::kRouter;
    if (!matmul || s.numel() == 0) continue;
    MatmulWork mm;
    mm.rows = s.expert_weight() ? rows_per_expert(m, x) : N;
    mm.inner = s.cols;
    mm.cols = s.rows;  // weights are (out, in)
    mm.calls = micro_batches;
    if (head) {
      // The head runs once per loss tile (num_vocab_tiling) on the tile's rows.
      mm.rows = model::logit_rows(N, m.vocab_tiles);
      mm.calls = micro_batches * ((N + mm.rows - 1) / mm.rows);
    }
    mm.recomputed_calls = recomputed(s, remat, m) ? micro_batches : 0;
    w.matmuls.push_back(mm);
  }
  const auto n = static_cast<double>(N * micro_batches);
  const auto E = static_cast<double>(m.emb_dim);
  const auto L = static_cast<double>(m.num_layers);
  const auto heads = static_cast<double>((m.num_query_heads + m.num_kv_heads) / tensor);
  const auto D = static_cast<double>(m.head_dim);
  // SwiGLU's hidden units: the dense MLP's share of F, or every routed row's F.
  const double hidden = m.moe ? n * static_cast<double>(m.num_experts_per_tok * m.mlp_dim)
                              : n * static_cast<double>(m.mlp_dim / tensor);
  // Bytes per element (f32), forward + backward: what a kernel that only streams memory moves.
  w.vectors = {
      {"rmsnorm", n * E * (2 * L + 1), 20},  // two per layer and the final one
      {"swiglu", hidden * L, 32},
      {"rope", n * heads * D * L, 16},      // q and k
      {"residual_add", n * E * 2 * L, 20},  // after attention and after the MLP
      {"embedding", n * E, 16},
      {"cross_entropy", n * static_cast<double>(m.vocab_size), 12},
      {"accuracy", n * static_cast<double>(m.vocab_size), 4},  // the metric's arg max
      {"adamw", static_cast<double>(parameter_shard), 28},
      {"grad_norm", static_cast<double>(parameter_shard), 4},
      // Clipping scales the shard when the norm is over the threshold: counted as if it were.
      {"grad_clip", clipping ? static_cast<double>(parameter_shard) : 0.0, 8},
  };
  return w;
}

}  // namespace maxctx::plan

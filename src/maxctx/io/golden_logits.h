// Golden logits in MaxText's forward_pass_logit_checker format, and the comparison it makes.
//
// The file is JSONL: one object per line, {"prompt": str, "tokens": [int, ...],
// "logits": [[float × vocab] × len(tokens)]}; row t holds the logits after tokens[0..t]. Other
// keys are ignored; blank lines are skipped. Instead of "logits" (or beside it) a line may hold
// top-k goldens, what a reference keeps of a real vocabulary: "top_k_ids" and "top_k_logits",
// [[K values] × rows], each row's K highest golden logits, highest first, with their ids, for the
// rows "top_k_rows" (ascending row indices; absent: every row). Reading validates everything (a
// number that is not one, ragged rows, a row count other than the token count) with errors that
// name the line. What it is not: the forward pass (src/cli/check_logits.cpp runs the model).
//
// The comparison is MaxText's: every logit must satisfy |model − golden| <= atol + rtol·|golden|
// (numpy.allclose), and the largest per-token KL(golden ‖ model) of the softmaxes (nats, computed
// in double, so it judges the fp32 model, not its own rounding) must not exceed max_kl_div.
// Top-k goldens are compared by compare_top_k (no KL: the rest of the vocabulary is unknown).
#pragma once

#include <cstdint>
#include <filesystem>
#include <span>
#include <string>
#include <vector>

namespace maxctx::io {

struct GoldenPrompt {
  std::string prompt;
  std::vector<int32_t> tokens;  // (S)
  int64_t vocab = 0;            // V
  std::vector<float> logits;    // (S, V) row-major; empty when the line has top-k goldens only
  // Top-k goldens (empty without): for row top_k_rows[r], the K golden ids with the highest
  // logits, highest first, and those logits.
  int64_t top_k = 0;                     // K
  std::vector<int64_t> top_k_rows = {};  // (R)
  std::vector<int32_t> top_k_ids = {};   // (R, K)
  std::vector<float> top_k_logits = {};  // (R, K), non-increasing along K
  int64_t seq() const { return static_cast<int64_t>(tokens.size()); }
};

std::vector<GoldenPrompt> read_golden_logits(const std::filesystem::path& path);
// One line per prompt; floats in their shortest round-trip form, so reading back is bit-exact.
void write_golden_logits(const std::filesystem::path& path, std::span<const GoldenPrompt> prompts);

// KL(p ‖ q) = Σ_v p_v (log p_v − log q_v) with p = softmax(golden), q = softmax(model), in
// double through log-sum-exp.
double kl_divergence_of_logits(std::span<const float> golden, std::span<const float> model);

struct LogitComparison {
  int64_t tokens = 0;         // rows compared
  int64_t logits = 0;         // elements compared
  double max_abs_diff = 0.0;  // max |model − golden|
  double max_kl = 0.0;        // max over rows of KL(golden ‖ model)
  int64_t max_kl_token = 0;   // the row where it occurs
  int64_t num_outside = 0;    // elements with |model − golden| > atol + rtol·|golden|
  // The element furthest outside its bound (largest |diff| − bound), when num_outside > 0.
  int64_t worst_token = 0;
  int64_t worst_vocab = 0;
  float worst_model = 0.0f;
  float worst_golden = 0.0f;
};

// golden and model are (seq, vocab) row-major. A NaN anywhere counts as outside, and as an
// infinite KL for its row.
LogitComparison compare_logits(std::span<const float> golden, std::span<const float> model,
                               int64_t seq, int64_t vocab, double atol, double rtol);

struct TopKComparison {
  int64_t rows = 0;           // rows compared
  double max_abs_diff = 0.0;  // max |model − golden| over the golden ids
  int64_t num_failed = 0;     // rows that fail
  std::string first_failure;  // why the first failing row fails (row, ids, logits)
};

// Top-k goldens against the model's (seq, vocab) logits. With tol(g) = atol + rtol·|g|, a row
// passes when (1) every golden id's model logit is within tol of its golden logit, and (2) no
// other id's model logit exceeds the K-th golden logit g_K by more than tol(g_K). Together: the
// model's top k are the golden ids in the golden order, except where logits are within tolerance
// of each other (a tie may swap two ids, or swap the K-th id with one just outside). A NaN fails.
// `golden`'s ids must be below `vocab` (checked).
TopKComparison compare_top_k(const GoldenPrompt& golden, std::span<const float> model,
                             int64_t vocab, double atol, double rtol);

}  // namespace maxctx::io

// Golden logits in MaxText's forward_pass_logit_checker format, and the comparison it makes.
//
// The file is JSONL: one object per line, {"prompt": str, "tokens": [int, ...],
// "logits": [[float × vocab] × len(tokens)]}; row t holds the logits after tokens[0..t]. Other
// keys are ignored; blank lines are skipped. Reading validates everything (a number that is not
// one, ragged rows, a row count other than the token count) with errors that name the line.
// What it is not: the forward pass (src/cli/check_logits.cpp runs the model).
//
// The comparison is MaxText's: every logit must satisfy |model − golden| <= atol + rtol·|golden|
// (numpy.allclose), and the largest per-token KL(golden ‖ model) of the softmaxes (nats, computed
// in double, so it judges the fp32 model, not its own rounding) must not exceed max_kl_div.
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
  std::vector<float> logits;    // (S, V) row-major
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

}  // namespace maxctx::io

// Definitions for kernels/types.h: the attention parameter checks and the RoPE inverse
// frequencies, shared by every backend and by the reference. Computed in double: the angles
// pos · inv_freq are formed in double by every implementation before any rounding to float. The
// llama3 branch follows Hugging Face's rope_type "llama3" (_compute_llama3_parameters) band for
// band.
#include "maxctx/kernels/types.h"

#include <cmath>
#include <numbers>

#include "maxctx/core/check.h"

namespace maxctx::kernels {

double AttentionParams::softmax_scale() const {
  return scale != 0.0 ? scale : 1.0 / std::sqrt(static_cast<double>(head_dim));
}

void check_attention_params(const AttentionParams& params) {
  MAXCTX_CHECK_GT(params.batch, 0, "attention batch must be positive");
  MAXCTX_CHECK_GE(params.seq_q, 0, "attention seq_q must be >= 0");
  MAXCTX_CHECK_GE(params.seq_k, 0, "attention seq_k must be >= 0");
  MAXCTX_CHECK_GT(params.heads_q, 0, "attention heads_q must be positive");
  MAXCTX_CHECK_GT(params.heads_kv, 0, "attention heads_kv must be positive");
  MAXCTX_CHECK_EQ(params.heads_q % params.heads_kv, 0,
                  "heads_q must be a multiple of heads_kv (GQA groups)");
  MAXCTX_CHECK_GT(params.head_dim, 0, "attention head_dim must be positive");
  MAXCTX_CHECK_GE(params.sliding_window, 0, "sliding_window must be >= 0 (0 = no window)");
  MAXCTX_CHECK(std::isfinite(params.scale), "attention scale must be finite, got {}", params.scale);
}

std::vector<double> rope_inv_freq(const RopeParams& params, int64_t head_dim) {
  MAXCTX_CHECK(head_dim > 0 && head_dim % 2 == 0,
               "rope needs an even head_dim > 0, got {}: pairs (i, i + head_dim/2) rotate",
               head_dim);
  MAXCTX_CHECK_GT(params.theta, 0.0, "rope_theta must be positive");
  const int64_t half = head_dim / 2;
  std::vector<double> inv_freq(half);
  for (int64_t i = 0; i < half; ++i) {
    inv_freq[i] = std::pow(params.theta, -double(2 * i) / double(head_dim));
  }
  if (params.scaling == RopeScaling::kNone) return inv_freq;

  // The values come from a config or a config.json: a user's error, one line on every rank, not a
  // failed check (issue #34 N8). NaN fails every comparison and is refused with them.
  for (const auto& [name, value] :
       {std::pair{"factor", params.factor}, std::pair{"low_freq_factor", params.low_freq_factor},
        std::pair{"high_freq_factor", params.high_freq_factor},
        std::pair{"original_max_position_embeddings", params.original_max_position_embeddings}}) {
    if (!(value > 0.0 && std::isfinite(value))) {
      fail("llama3 rope_scaling {} = {} must be finite and positive", name, value);
    }
  }
  if (!(params.high_freq_factor > params.low_freq_factor)) {
    fail("llama3 rope_scaling needs high_freq_factor > low_freq_factor, got {} and {}",
         params.high_freq_factor, params.low_freq_factor);
  }
  const double old_context = params.original_max_position_embeddings;
  const double low_freq_wavelength = old_context / params.low_freq_factor;
  const double high_freq_wavelength = old_context / params.high_freq_factor;
  for (double& f : inv_freq) {
    const double wavelength = 2.0 * std::numbers::pi / f;
    if (wavelength < high_freq_wavelength) continue;  // high frequencies: unchanged
    if (wavelength > low_freq_wavelength) {           // low frequencies: slowed by factor
      f /= params.factor;
      continue;
    }
    const double smooth = (old_context / wavelength - params.low_freq_factor) /
                          (params.high_freq_factor - params.low_freq_factor);
    f = (1.0 - smooth) * f / params.factor + smooth * f;
  }
  return inv_freq;
}

}  // namespace maxctx::kernels

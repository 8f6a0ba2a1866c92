// The RoPE inverse frequencies, shared by ref/ and cpu/ (see rope.h for the formula).
//
// Computed in double and returned in double: the angles pos · inv_freq are formed in double by
// both implementations before any rounding to float. The llama3 branch follows Hugging Face's
// rope_type "llama3" (_compute_llama3_parameters) band for band.
#include "maxctx/kernels/ref/rope.h"

#include <cmath>
#include <numbers>

#include "maxctx/core/check.h"

namespace maxctx::kernels {

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

  MAXCTX_CHECK_GT(params.factor, 0.0, "llama3 rope scaling factor must be positive");
  MAXCTX_CHECK_GT(params.original_max_position_embeddings, 0.0,
                  "llama3 rope original_max_position_embeddings must be positive");
  MAXCTX_CHECK_GT(params.high_freq_factor, params.low_freq_factor,
                  "llama3 rope needs high_freq_factor > low_freq_factor");
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

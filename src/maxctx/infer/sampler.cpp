#include "maxctx/infer/sampler.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "maxctx/core/check.h"
#include "maxctx/core/rng.h"

namespace maxctx::infer {

SamplingParams sampling_params(const std::string& strategy, double temperature, int64_t top_k,
                               double nucleus_p, uint64_t seed) {
  SamplingParams p;
  p.seed = seed;
  p.temperature = static_cast<float>(temperature);
  p.top_k = top_k;
  p.nucleus_p = static_cast<float>(nucleus_p);
  if (strategy == "greedy") {
    p.strategy = SamplingStrategy::kGreedy;
    return p;
  }
  if (strategy == "weighted") {
    p.strategy = SamplingStrategy::kWeighted;
  } else if (strategy == "topk") {
    p.strategy = SamplingStrategy::kTopK;
    if (top_k < 1) fail("decode_sampling_top_k = {} with topk sampling: allowed >= 1", top_k);
  } else if (strategy == "nucleus") {
    p.strategy = SamplingStrategy::kNucleus;
    if (!(nucleus_p > 0.0 && nucleus_p <= 1.0)) {
      fail("decode_sampling_nucleus_p = {} with nucleus sampling: allowed (0, 1]", nucleus_p);
    }
  } else {
    fail("decode_sampling_strategy = '{}': allowed greedy, weighted, topk, nucleus", strategy);
  }
  if (!(temperature > 0.0) || !std::isfinite(temperature)) {
    fail("decode_sampling_temperature = {} with {} sampling: allowed > 0", temperature, strategy);
  }
  return p;
}

int32_t Sampler::sample(const float* logits, int64_t vocab, int64_t slot, int64_t position) {
  MAXCTX_CHECK_GT(vocab, 0, "sampling from an empty vocabulary");
  if (params_.strategy == SamplingStrategy::kGreedy) {
    return static_cast<int32_t>(std::max_element(logits, logits + vocab) - logits);
  }
  order_.resize(static_cast<size_t>(vocab));
  std::iota(order_.begin(), order_.end(), 0);
  // Most probable first; equal logits in id order, so the candidate set is unambiguous.
  const auto before = [logits](int32_t a, int32_t b) {
    return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
  };
  int64_t candidates = vocab;
  if (params_.strategy == SamplingStrategy::kTopK) {
    candidates = std::min(vocab, params_.top_k);
    std::partial_sort(order_.begin(), order_.begin() + candidates, order_.end(), before);
  } else if (params_.strategy == SamplingStrategy::kNucleus) {
    std::sort(order_.begin(), order_.end(), before);
  }
  // Softmax in double over the candidates, from the largest logit down.
  const double max_logit = *std::max_element(logits, logits + vocab);
  weights_.resize(static_cast<size_t>(candidates));
  double total = 0.0;
  for (int64_t i = 0; i < candidates; ++i) {
    weights_[i] = std::exp((double(logits[order_[i]]) - max_logit) / params_.temperature);
    total += weights_[i];
  }
  if (params_.strategy == SamplingStrategy::kNucleus) {
    double mass = 0.0;
    int64_t kept = 0;
    while (kept < candidates) {
      mass += weights_[kept++];
      if (mass >= params_.nucleus_p * total) break;
    }
    candidates = kept;
    total = mass;
  }
  const uint64_t index = (static_cast<uint64_t>(slot) << 32) | static_cast<uint32_t>(position);
  const double target =
      double(rng::uniform_at(params_.seed, rng::stream_id("decode_sampling"), index)) * total;
  double cumulative = 0.0;
  for (int64_t i = 0; i < candidates; ++i) {
    cumulative += weights_[i];
    if (target < cumulative) return order_[i];
  }
  return order_[candidates - 1];
}

}  // namespace maxctx::infer

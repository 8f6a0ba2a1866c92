// Choosing the next token from one row of logits (MaxText's decode_sampling_* keys).
//
//  greedy    argmax (the lowest id among equal maxima)
//  weighted  softmax(logits / temperature), sampled
//  topk      the k largest logits (ties broken by lower id), softmax / temperature among them
//  nucleus   the smallest set of most probable tokens whose probability reaches p, sampled
//
// The random draw is rng::uniform_at(seed, stream "decode_sampling", slot·2^32 + position): a
// pure function of the request's global slot and the new token's position. Every rank holding
// the same logits draws the same token, and a run sharded any other way draws the same one too.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace maxctx::infer {

enum class SamplingStrategy { kGreedy, kWeighted, kTopK, kNucleus };

struct SamplingParams {
  SamplingStrategy strategy = SamplingStrategy::kGreedy;
  float temperature = 1.0f;  // weighted, topk, nucleus: > 0
  int64_t top_k = 0;         // topk: 1..vocab
  float nucleus_p = 1.0f;    // nucleus: (0, 1]
  uint64_t seed = 0;
};

// Parses decode_sampling_strategy and checks the parameters it needs; maxctx::Error naming the
// key otherwise.
SamplingParams sampling_params(const std::string& strategy, double temperature, int64_t top_k,
                               double nucleus_p, uint64_t seed);

class Sampler {
 public:
  explicit Sampler(const SamplingParams& params) : params_(params) {}
  int32_t sample(const float* logits, int64_t vocab, int64_t slot, int64_t position);

 private:
  SamplingParams params_;
  std::vector<int32_t> order_;  // candidate ids, most probable first
  std::vector<double> weights_;
};

}  // namespace maxctx::infer

// Shared by the inference tests: the tiny models, meshes over the context_autoregressive axis,
// prompts of unequal lengths, and the error measures.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "maxctx/core/check.h"
#include "maxctx/core/rng.h"
#include "maxctx/infer/engine.h"
#include "maxctx/mesh/mesh.h"
#include "maxctx/model/hf_import.h"
#include "maxctx/model/weights.h"
#include "maxctx/parallel/weight_sharding.h"

namespace maxctx::infer::testing {

// maxctx-tiny's dimensions (configs/models/maxctx-tiny.yml), GQA with 2 query heads per kv head.
inline model::LlamaConfig tiny_config() {
  model::LlamaConfig c;
  c.vocab_size = 256;
  c.emb_dim = 64;
  c.num_query_heads = 4;
  c.num_kv_heads = 2;
  c.head_dim = 16;
  c.mlp_dim = 192;
  c.num_layers = 2;
  return c;
}

// Counter-based init (the training init); `logit_gain` scales the output head so that the
// next-token distributions are peaked like a trained model's rather than near uniform.
inline std::vector<float> init_weights(const model::LlamaConfig& c, uint64_t seed,
                                       float logit_gain = 1.0f) {
  const auto specs = model::llama_weight_specs(c);
  std::vector<float> flat(static_cast<size_t>(model::total_numel(specs)));
  model::init_weights(specs, flat.data(), seed);
  if (logit_gain != 1.0f) {
    const model::LlamaWeights w = model::bind_weights(specs, flat.data());
    for (int64_t i = 0; i < c.vocab_size * c.emb_dim; ++i) w.lm_head.data<float>()[i] *= logit_gain;
  }
  return flat;
}

inline const char* fixture_dir() { return MAXCTX_TEST_FIXTURES "/tiny_llama"; }
inline const char* mixtral_fixture_dir() { return MAXCTX_TEST_FIXTURES "/tiny_mixtral"; }

inline std::vector<float> fixture_weights(const model::LlamaConfig& c,
                                          const char* dir = fixture_dir()) {
  const auto specs = model::llama_weight_specs(c);
  std::vector<float> flat(static_cast<size_t>(model::total_numel(specs)));
  model::load_hf_weights(specs, flat.data(), dir);
  return flat;
}

// A mesh whose context_autoregressive axis holds every rank of `base`.
inline Mesh ca_mesh(Communicator base) {
  MeshSpec spec;
  spec.ici[axis_index(Axis::kContextAutoregressive)] = -1;
  return Mesh(spec, std::move(base));
}

// One prompt per slot, lengths cycling through 1..max_length (unequal on purpose), ids drawn
// from the counter RNG so every rank builds the same prompts.
inline std::vector<std::vector<int32_t>> make_prompts(int64_t slots, int64_t max_length,
                                                      int64_t vocab, uint64_t seed) {
  std::vector<std::vector<int32_t>> prompts;
  const int64_t lengths[] = {max_length, 1, max_length / 2 + 1, 3, max_length - 1, 7};
  for (int64_t b = 0; b < slots; ++b) {
    const int64_t n = std::clamp<int64_t>(lengths[b % 6], 1, max_length);
    std::vector<int32_t> ids(static_cast<size_t>(n));
    rng::fill_uniform_int(ids, seed, rng::stream_id("prompts"), static_cast<uint64_t>(b) << 20,
                          static_cast<uint32_t>(vocab));
    prompts.push_back(ids);
  }
  return prompts;
}

// max |a − b| / max |b| over one row (the norm-relative error of the model tests).
inline double relative_error(const float* a, const float* b, int64_t n) {
  double diff = 0.0, scale = 0.0;
  for (int64_t i = 0; i < n; ++i) {
    diff = std::max(diff, std::fabs(double(a[i]) - double(b[i])));
    scale = std::max(scale, std::fabs(double(b[i])));
  }
  return scale == 0.0 ? diff : diff / scale;
}

// KL(softmax(p) || softmax(q)) in nats, in double.
inline double kl_divergence(const float* p_logits, const float* q_logits, int64_t n) {
  const double p_max = *std::max_element(p_logits, p_logits + n);
  const double q_max = *std::max_element(q_logits, q_logits + n);
  double p_sum = 0.0, q_sum = 0.0;
  for (int64_t i = 0; i < n; ++i) {
    p_sum += std::exp(p_logits[i] - p_max);
    q_sum += std::exp(q_logits[i] - q_max);
  }
  const double p_lse = p_max + std::log(p_sum), q_lse = q_max + std::log(q_sum);
  double kl = 0.0;
  for (int64_t i = 0; i < n; ++i) {
    const double lp = p_logits[i] - p_lse, lq = q_logits[i] - q_lse;
    kl += std::exp(lp) * (lp - lq);
  }
  return kl;
}

// Every step's (slots, V) logits of `engine` fed the tokens `forced` (per slot: the tokens the
// fp32 run generated), slot b active while it has tokens left to feed.
inline std::vector<std::vector<float>> forced_logits(
    InferenceEngine& engine, const std::vector<std::vector<int32_t>>& prompts,
    const std::vector<std::vector<int32_t>>& forced) {
  const int64_t B = engine.slots();
  std::vector<std::vector<float>> steps = {engine.prefill(prompts)};
  for (size_t step = 0;; ++step) {
    std::vector<int32_t> tokens(B, 0);
    std::vector<uint8_t> active(B, 0);
    bool any = false;
    for (int64_t b = 0; b < B; ++b) {
      if (step + 1 < forced[b].size()) {
        tokens[b] = forced[b][step];
        active[b] = 1;
        any = true;
      }
    }
    if (!any) return steps;
    steps.push_back(engine.decode_step(tokens, active));
  }
}

// The worst norm-relative error of `engine`'s logits against `reference`'s: the prefill's
// (step 0) and the decode steps', both fed the reference's greedy tokens (teacher forcing, so a
// near-tie of the argmax cannot send the two runs down different sequences). `steps`: how many
// were compared.
struct ForcedLogitErrors {
  double prefill = 0.0, decode = 0.0;
  size_t steps = 0;
};
inline ForcedLogitErrors forced_logit_errors(InferenceEngine& reference, InferenceEngine& engine,
                                             const std::vector<std::vector<int32_t>>& prompts) {
  const GenerateResult greedy = reference.generate(prompts);
  const auto want = forced_logits(reference, prompts, greedy.tokens);
  const auto got = forced_logits(engine, prompts, greedy.tokens);
  ForcedLogitErrors errors;
  errors.steps = std::min(want.size(), got.size());
  const int64_t V = engine.model_config().vocab_size;
  for (size_t step = 0; step < errors.steps; ++step) {
    for (int64_t b = 0; b < engine.slots(); ++b) {
      if (step >= greedy.tokens[b].size()) continue;
      const double e = relative_error(got[step].data() + b * V, want[step].data() + b * V, V);
      double& worst = step == 0 ? errors.prefill : errors.decode;
      worst = std::max(worst, e);
    }
  }
  if (want.size() != got.size()) errors.prefill = errors.decode = HUGE_VAL;
  return errors;
}

// The message of the Error `run` throws ("" when it throws none).
template <typename Fn>
std::string error_of(Fn run) {
  try {
    run();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

// The bytes one expert's three matrices occupy in an engine: the loaded weights, or their int8
// copies when it quantized them (issue #31: no float copy is kept).
inline int64_t expert_bytes(const model::ExpertWeights& e) {
  int64_t bytes = 0;
  const std::pair<TensorView, const kernels::Int8Weights*> matrices[] = {
      {e.w_gate, e.w_gate_i8}, {e.w_up, e.w_up_i8}, {e.w_down, e.w_down_i8}};
  for (const auto& [view, i8] : matrices) {
    bytes += i8 == nullptr ? static_cast<int64_t>(view.bytes())
                           : model::int8_weight_bytes(i8->out_dim, i8->in_dim);
  }
  return bytes;
}

// The bytes of the embedding, head and attention projection rows that `reference` (one rank)
// holds and `engine` (its rows of them over context_autoregressive) does not, as `reference`
// holds them.
inline int64_t other_vocab_bytes(const InferenceEngine& reference, const InferenceEngine& engine) {
  const auto linear_bytes = [](const model::Linear& l) {
    return l.i8 != nullptr ? model::int8_weight_bytes(l.out_dim, l.in_dim)
                           : static_cast<int64_t>(l.weight.bytes());
  };
  const int64_t embed = static_cast<int64_t>(reference.weights().embed.bytes()) -
                        static_cast<int64_t>(engine.weights().embed.bytes());
  const bool tied = reference.model_config().tie_embeddings;
  int64_t others = embed + (tied ? 0
                                 : linear_bytes(reference.weights().lm_head) -
                                       linear_bytes(engine.weights().lm_head));
  // The attention projections' rows, split over context_autoregressive alike.
  for (size_t l = 0; l < reference.weights().layers.size(); ++l) {
    const model::DecoderLayerWeights& all = reference.weights().layers[l];
    const model::DecoderLayerWeights& held = engine.weights().layers[l];
    for (const auto member : {&model::DecoderLayerWeights::wq, &model::DecoderLayerWeights::wk,
                              &model::DecoderLayerWeights::wv, &model::DecoderLayerWeights::wo}) {
      others += linear_bytes(all.*member) - linear_bytes(held.*member);
    }
  }
  return others;
}

// The bytes of the experts that `reference` (holding every expert) holds and `engine` should
// not (those outside `mine`), as `reference` holds them; checks that `engine` holds exactly
// `mine`'s experts, each as `reference` holds it, and nothing of the others.
inline int64_t other_experts_bytes(const InferenceEngine& reference, const InferenceEngine& engine,
                                   const parallel::ExpertRange& mine) {
  int64_t others = 0;
  for (size_t l = 0; l < reference.weights().layers.size(); ++l) {
    const auto& all = reference.weights().layers[l].moe.experts;
    const auto& held = engine.weights().layers[l].moe.experts;
    EXPECT_EQ(held.size(), all.size());
    for (int64_t e = 0; e < static_cast<int64_t>(std::min(all.size(), held.size())); ++e) {
      if (!mine.holds(e)) others += expert_bytes(all[e]);
      EXPECT_EQ(expert_bytes(held[e]), mine.holds(e) ? expert_bytes(all[e]) : 0)
          << "layer " << l << " expert " << e;
    }
  }
  return others;
}

// The mesh a command builds from a config's axes.
inline Mesh mesh_of(const Config& c) {
  MeshSpec spec;
  spec.ici = c.derived.ici_parallelism;
  spec.dcn = c.derived.dcn_parallelism;
  return Mesh(spec);
}

}  // namespace maxctx::infer::testing

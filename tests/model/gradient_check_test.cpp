// Whole-model gradient check: the analytic gradient's directional derivative g·u against central
// finite differences of the loss, for a random direction u restricted to one weight tensor at a
// time, on a tiny model with packed documents and GQA.
//
// The model computes in float32, so the step cannot be tiny: with ε = 1e-2 the central
// difference D(ε) = (L(θ+εu) − L(θ−εu)) / 2ε is ~1% off by truncation (O(ε²)). Richardson
// extrapolation (4·D(ε/2) − D(ε)) / 3 cancels that term (O(ε⁴) left); float rounding of the loss
// (~1e-7·L, L ≈ 4, over steps of 1e-2) leaves ~1e-4 of derivatives of order 1, hence the 1e-3
// relative bound. A wrong term in any backward is O(1) off. The torch fixtures are the tight
// check (1e-4); this one needs no oracle.
#include <gtest/gtest.h>

#include "model_test_util.h"

namespace maxctx::model {
namespace {

TEST(ModelGradient, DirectionalDerivativesMatchFiniteDifferences) {
  testing::LocalModel m(testing::tiny_config());
  init_weights(m.specs, m.params.data(), 11);
  const testing::RandomBatch data(m.config.vocab_size);
  const TokenBatch batch = data.view();
  LlamaActivations acts = allocate_activations(*m.plan.kernels, m.config, batch.batch, batch.seq);

  const auto loss_at = [&]() {
    const LossSums s = llama_forward(m.config, m.weights, batch, m.plan, acts);
    return s.loss_sum / s.weight_sum;
  };
  const LossSums sums = llama_forward(m.config, m.weights, batch, m.plan, acts);
  llama_backward(m.config, m.weights, m.gradients, batch, m.plan, acts,
                 static_cast<float>(1.0 / sums.weight_sum));

  const float epsilon = 1e-2f;
  for (const WeightSpec& s : m.specs) {
    std::vector<float> direction(s.numel());
    rng::fill_normal(direction, 3, rng::stream_id(s.name), 0, 0.0f, 1.0f);
    double analytic = 0.0;
    for (int64_t i = 0; i < s.numel(); ++i)
      analytic += double(m.grads[s.offset + i]) * direction[i];
    const std::vector<float> saved(m.params.begin() + s.offset,
                                   m.params.begin() + s.offset + s.numel());
    const auto loss_moved_by = [&](float step) {
      for (int64_t i = 0; i < s.numel(); ++i) {
        m.params[s.offset + i] = saved[i] + step * direction[i];
      }
      const double loss = loss_at();
      std::copy(saved.begin(), saved.end(), m.params.begin() + s.offset);
      return loss;
    };
    const auto central = [&](float step) {
      return (loss_moved_by(step) - loss_moved_by(-step)) / (2.0 * step);
    };
    const double numeric = (4.0 * central(epsilon / 2) - central(epsilon)) / 3.0;
    EXPECT_NEAR(analytic, numeric, 1e-3 * std::max(1.0, std::fabs(numeric))) << s.name;
  }
}

TEST(ModelGradient, PaddingAndUnscoredTokensDoNotChangeTheLoss) {
  testing::LocalModel m(testing::tiny_config());
  init_weights(m.specs, m.params.data(), 11);
  testing::RandomBatch data(m.config.vocab_size);
  LlamaActivations acts = allocate_activations(*m.plan.kernels, m.config, data.B, data.S);
  const LossSums before = llama_forward(m.config, m.weights, data.view(), m.plan, acts);
  // Row 1's last two tokens are padding (segment 0, weight 0): changing them changes nothing.
  data.tokens[data.S + 10] = 3;
  data.tokens[data.S + 11] = 4;
  data.targets[data.S + 11] = 1;
  const LossSums after = llama_forward(m.config, m.weights, data.view(), m.plan, acts);
  EXPECT_EQ(before.loss_sum, after.loss_sum);
  EXPECT_EQ(before.weight_sum, 22.0);
}

// A rank's fsdp shard is initialised alone (init_weight_range): any range of the flat buffer,
// of the whole model or of a tensor rank's blocks, holds exactly init_weights' values there.
TEST(InitWeights, AnyRangeEqualsTheWholeInitialisation) {
  LlamaConfig c = testing::tiny_config();
  for (const int tp_rank : {-1, 0, 1}) {
    const std::vector<WeightSpec> specs =
        tp_rank < 0 ? llama_weight_specs(c) : llama_weight_specs(c, 2, tp_rank);
    const int64_t total = total_numel(specs);
    std::vector<float> whole(static_cast<size_t>(total));
    init_weights(specs, whole.data(), 7);
    for (const int64_t parts : {1, 3, 7, 64}) {
      for (int64_t p = 0; p < parts; ++p) {
        const int64_t begin = total * p / parts, end = total * (p + 1) / parts;
        std::vector<float> range(static_cast<size_t>(end - begin), -1.0f);
        init_weight_range(specs, begin, range, 7);
        EXPECT_TRUE(std::equal(range.begin(), range.end(), whole.begin() + begin))
            << "tp rank " << tp_rank << ", part " << p << " of " << parts;
      }
    }
  }
}

}  // namespace
}  // namespace maxctx::model

// AdamW against a hand-worked two-element example and a plain double-precision loop, shard
// updates equal to the whole, and global-norm clipping.
#include "maxctx/train/optimizer.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "maxctx/config/config.h"
#include "maxctx/core/check.h"
#include "maxctx/core/rng.h"

namespace maxctx {
namespace {

constexpr double kRelTol = 1e-5;  // fp32

void expect_rel_near(double actual, double expected, double tol, const std::string& what) {
  EXPECT_LE(std::abs(actual - expected), tol * std::max(1e-30, std::abs(expected)))
      << what << ": " << actual << " vs " << expected;
}

TEST(AdamW, TwoElementsByHand) {
  // b1 0.9, b2 0.95, eps 1e-8, wd 0.1, lr 0.01, p = [1, -2].
  // Step 1, g = [0.5, -1]: m = 0.1 g, v = 0.05 g², m̂ = g, v̂ = g², so the Adam direction is
  // g / (|g| + 1e-8) = ±(1 − 2e-8 / ...) and p −= 0.01 · (±1 + 0.1 p):
  //   p = [1 − 0.01·1.1, −2 + 0.01·1.2] = [0.989, −1.988] (to 1e-10).
  // Step 2, g = [0.1, 0.2]: m = [0.055, −0.07], v = [0.012375, 0.0495],
  //   m̂ = m / 0.19, v̂ = v / 0.0975, p −= 0.01 · (m̂ / (sqrt(v̂) + 1e-8) + 0.1 p)
  //   = [0.97988571188, −1.98084136201].
  const AdamWConfig config{0.9, 0.95, 1e-8, 0.0, 0.1};
  std::vector<float> p = {1.0f, -2.0f}, m(2, 0.0f), v(2, 0.0f);
  adamw_update(maxctx::kernels::backend(maxctx::Device::kCpu), config, 1, 0.01f, p,
               std::vector<float>{0.5f, -1.0f}, m, v);
  expect_rel_near(p[0], 0.9890000002, 1e-6, "p0 step 1");
  expect_rel_near(p[1], -1.9880000001, 1e-6, "p1 step 1");
  expect_rel_near(m[0], 0.05, 1e-6, "m0");
  expect_rel_near(m[1], -0.1, 1e-6, "m1");
  expect_rel_near(v[0], 0.0125, 1e-6, "v0");
  expect_rel_near(v[1], 0.05, 1e-6, "v1");
  adamw_update(maxctx::kernels::backend(maxctx::Device::kCpu), config, 2, 0.01f, p,
               std::vector<float>{0.1f, 0.2f}, m, v);
  expect_rel_near(p[0], 0.9798857118826706, 1e-6, "p0 step 2");
  expect_rel_near(p[1], -1.9808413620073408, 1e-6, "p1 step 2");
  expect_rel_near(m[0], 0.055, 1e-6, "m0 step 2");
  expect_rel_near(v[1], 0.0495, 1e-6, "v1 step 2");
}

// The oracle: optax's formulas as plain double loops.
void adamw_reference(double b1, double b2, double eps, double eps_root, double wd, int64_t step,
                     double lr, std::vector<double>& p, const std::vector<float>& g,
                     std::vector<double>& m, std::vector<double>& v) {
  for (size_t i = 0; i < p.size(); ++i) {
    m[i] = b1 * m[i] + (1 - b1) * g[i];
    v[i] = b2 * v[i] + (1 - b2) * g[i] * g[i];
    const double m_hat = m[i] / (1 - std::pow(b1, step));
    const double v_hat = v[i] / (1 - std::pow(b2, step));
    p[i] -= lr * (m_hat / (std::sqrt(v_hat + eps_root) + eps) + wd * p[i]);
  }
}

TEST(AdamW, MatchesADoubleLoopOverManySteps) {
  // Element i's gradients have scale 10^-(i % 6): at 1e-5 both eps (1e-8 against sqrt(v̂) ~
  // 1e-5) and eps_root (1e-11 against v̂ ~ 1e-10) change the update by far more than the
  // tolerance, so dropping either one fails this test.
  const size_t n = 1200;
  const AdamWConfig config{0.9, 0.95, 1e-8, 1e-11, 0.1};
  std::vector<float> p(n), m(n, 0.0f), v(n, 0.0f), g(n);
  rng::fill_normal(p, 1, rng::stream_id("test.params"), 0, 0.0f, 1.0f);
  std::vector<double> p_ref(p.begin(), p.end()), m_ref(n, 0.0), v_ref(n, 0.0);
  const auto scale_of = [](size_t i) { return std::pow(10.0, -static_cast<double>(i % 6)); };
  for (int64_t step = 1; step <= 200; ++step) {
    rng::fill_normal(g, 1, rng::stream_id("test.grads"), static_cast<uint64_t>(step) * n, 0.0f,
                     1.0f);
    for (size_t i = 0; i < n; ++i) g[i] *= static_cast<float>(scale_of(i));
    const double lr = 1e-3 * (1.0 + std::sin(static_cast<double>(step)));
    adamw_update(maxctx::kernels::backend(maxctx::Device::kCpu), config, step,
                 static_cast<float>(lr), p, g, m, v);
    adamw_reference(config.b1, config.b2, config.eps, config.eps_root, config.weight_decay, step,
                    static_cast<float>(lr), p_ref, g, m_ref, v_ref);
  }
  double worst_p = 0.0, worst_m = 0.0, worst_v = 0.0;
  for (size_t i = 0; i < n; ++i) {
    const double scale = scale_of(i);
    worst_p = std::max(worst_p, std::abs(p[i] - p_ref[i]) / std::abs(p_ref[i]));
    // m is a sum of signed terms and may cross 0: measure it against its gradients' scale.
    worst_m = std::max(worst_m, std::abs(m[i] - m_ref[i]) / scale);
    worst_v = std::max(worst_v, std::abs(v[i] - v_ref[i]) / v_ref[i]);
  }
  EXPECT_LE(worst_p, kRelTol) << "worst relative parameter error";
  EXPECT_LE(worst_m, kRelTol) << "worst first-moment error relative to the gradient scale";
  EXPECT_LE(worst_v, kRelTol) << "worst relative second-moment error";
}

TEST(AdamW, AShardUpdatesExactlyLikeTheWhole) {
  const size_t n = 257;
  const AdamWConfig config;
  std::vector<float> whole(n), m(n, 0.0f), v(n, 0.0f), g(n);
  rng::fill_normal(whole, 2, 1, 0, 0.0f, 1.0f);
  std::vector<float> sharded = whole, m2 = m, v2 = v;
  for (int64_t step = 1; step <= 5; ++step) {
    rng::fill_normal(g, 2, 2, static_cast<uint64_t>(step) * n, 0.0f, 1.0f);
    adamw_update(maxctx::kernels::backend(maxctx::Device::kCpu), config, step, 1e-2f, whole, g, m,
                 v);
    const std::span<float> p_span(sharded), m_span(m2), v_span(v2);
    const std::span<const float> g_span(g);
    for (auto [begin, end] : {std::pair<size_t, size_t>{0, 100}, {100, 257}}) {
      adamw_update(maxctx::kernels::backend(maxctx::Device::kCpu), config, step, 1e-2f,
                   p_span.subspan(begin, end - begin), g_span.subspan(begin, end - begin),
                   m_span.subspan(begin, end - begin), v_span.subspan(begin, end - begin));
    }
  }
  EXPECT_EQ(sharded, whole);
  EXPECT_EQ(m2, m);
  EXPECT_EQ(v2, v);
}

TEST(AdamW, ConfigKeysMapToTheUpdate) {
  Config config;
  config.adam_b1 = 0.8;
  config.adam_b2 = 0.99;
  config.adam_eps = 1e-6;
  config.adam_eps_root = 1e-9;
  config.adam_weight_decay = 0.01;
  const AdamWConfig adamw = adamw_config(config);
  EXPECT_EQ(adamw.b1, 0.8);
  EXPECT_EQ(adamw.b2, 0.99);
  EXPECT_EQ(adamw.eps, 1e-6);
  EXPECT_EQ(adamw.eps_root, 1e-9);
  EXPECT_EQ(adamw.weight_decay, 0.01);
}

TEST(Clipping, ScalesToTheThresholdOnlyAboveIt) {
  std::vector<float> g = {3.0f, -4.0f, 12.0f};  // norm 13
  const double norm = std::sqrt(sum_of_squares(g));
  EXPECT_DOUBLE_EQ(norm, 13.0);
  clip_by_global_norm(g, norm, 1.0);
  EXPECT_NEAR(std::sqrt(sum_of_squares(g)), 1.0, 1e-6);
  EXPECT_FLOAT_EQ(g[0], 3.0f / 13.0f);
  EXPECT_FLOAT_EQ(g[1], -4.0f / 13.0f);

  std::vector<float> small = {0.3f, -0.4f};  // norm 0.5 < 1: untouched, bit for bit
  const std::vector<float> before = small;
  clip_by_global_norm(small, std::sqrt(sum_of_squares(small)), 1.0);
  EXPECT_EQ(small, before);
  std::vector<float> off = {30.0f, 40.0f};
  clip_by_global_norm(off, 50.0, 0.0);  // threshold 0: clipping off
  EXPECT_EQ(off, (std::vector<float>{30.0f, 40.0f}));
}

TEST(Clipping, PartialSumsOfSquaresAddUpToTheGlobalNorm) {
  std::vector<float> g(1001);
  rng::fill_normal(g, 3, 1, 0, 0.0f, 2.0f);
  const std::span<const float> all(g);
  const double parts = sum_of_squares(all.first(300)) + sum_of_squares(all.subspan(300, 500)) +
                       sum_of_squares(all.subspan(800));
  expect_rel_near(parts, sum_of_squares(all), 1e-12, "sum of partial sums");
  // Clipping each part with the global norm equals clipping the whole.
  std::vector<float> whole = g, pieces = g;
  const double norm = std::sqrt(sum_of_squares(all));
  clip_by_global_norm(whole, norm, 1.0);
  const std::span<float> piece_span(pieces);
  clip_by_global_norm(piece_span.first(300), norm, 1.0);
  clip_by_global_norm(piece_span.subspan(300), norm, 1.0);
  EXPECT_EQ(pieces, whole);
}

}  // namespace
}  // namespace maxctx

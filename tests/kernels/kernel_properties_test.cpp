// Properties of single ops that the oracle table cannot show, checked on every float
// implementation (and on ref<double> where exactness is the point): RoPE's group structure,
// the Llama 3.1 frequency formula, order-free positions, the cross-entropy mask, bad indices,
// in-place calls and the optional matmul input gradient.
#include <gtest/gtest.h>

#include <cmath>
#include <numeric>
#include <string>
#include <vector>

#include "kernels/kernel_sets.h"
#include "kernels/test_util.h"
#include "maxctx/core/check.h"
#include "maxctx/core/tensor.h"
#include "maxctx/kernels/kernels.h"

namespace maxctx::kernels {
namespace {

using testing_util::cast;
using testing_util::close;
using testing_util::Metric;
using testing_util::normal_values;
using testing_util::uniform_ints;
using testing_util::widen;

// Turns MAXCTX_CHECK failures into exceptions for one scope.
class ThrowingChecks {
 public:
  ThrowingChecks() {
    set_check_handler([](const std::string& message) { throw Error(message); });
  }
  ~ThrowingChecks() { set_check_handler({}); }
  ThrowingChecks(const ThrowingChecks&) = delete;
  ThrowingChecks& operator=(const ThrowingChecks&) = delete;
};

// The message of the check a call fails, or "" if it passes.
template <typename Call>
std::string failed_check(const Call& call) {
  ThrowingChecks throwing;
  try {
    call();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

class EveryFloatKernelSet : public ::testing::TestWithParam<int> {
 protected:
  const KernelSet<float>& k() const { return *float_kernel_sets()[GetParam()]; }
};

INSTANTIATE_TEST_SUITE_P(Impl, EveryFloatKernelSet,
                         ::testing::Range(0, int(float_kernel_sets().size())),
                         [](const ::testing::TestParamInfo<int>& param_info) {
                           return std::string(float_kernel_sets()[param_info.param]->name);
                         });

RopeParams llama3_1_params() {
  RopeParams p;
  p.theta = 500000.0;
  p.scaling = RopeScaling::kLlama3;
  p.factor = 8.0;
  p.low_freq_factor = 1.0;
  p.high_freq_factor = 4.0;
  p.original_max_position_embeddings = 8192.0;
  return p;
}

// Rotating by p and then by −p (and forward then backward) returns the input.
template <typename T>
void expect_rope_round_trips(const KernelSet<T>& k, double tolerance) {
  const int64_t N = 19, H = 3, Dh = 80, half = Dh / 2;
  const std::vector<int32_t> positions = uniform_ints(N, "rope_round_trip/positions", 1u << 20);
  std::vector<int32_t> negated(N);
  for (int64_t n = 0; n < N; ++n) negated[n] = -positions[n];
  const RopeParams params = llama3_1_params();
  std::vector<T> cos(N * half), sin(N * half), cos_neg(N * half), sin_neg(N * half);
  k.rope_cos_sin(cos.data(), sin.data(), positions.data(), N, Dh, params);
  k.rope_cos_sin(cos_neg.data(), sin_neg.data(), negated.data(), N, Dh, params);
  const auto x = cast<T>(normal_values(N * H * Dh, "rope_round_trip/x", 0.0f, 1.0f));
  std::vector<T> rotated(x.size()), back(x.size());
  k.rope_forward(rotated.data(), x.data(), cos.data(), sin.data(), N, H, Dh);
  k.rope_forward(back.data(), rotated.data(), cos_neg.data(), sin_neg.data(), N, H, Dh);
  EXPECT_TRUE(close(widen(back), widen(x), Dh, Metric::kRowRelative, tolerance)) << "p then -p";
  k.rope_backward(back.data(), rotated.data(), cos.data(), sin.data(), N, H, Dh);
  EXPECT_TRUE(close(widen(back), widen(x), Dh, Metric::kRowRelative, tolerance))
      << "forward then backward";
}

TEST_P(EveryFloatKernelSet, RopeRotationByPThenMinusPIsIdentity) {
  expect_rope_round_trips(k(), 1e-6);
}

TEST(RopeRef, RotationByPThenMinusPIsIdentityInDouble) {
  expect_rope_round_trips(ref_kernels<double>(), 1e-13);
}

TEST(Rope, InvFreqMatchesHandComputedValues) {
  // Plain RoPE: theta^(-2i/Dh) with theta 1e4, Dh 128.
  const std::vector<double> plain = rope_inv_freq(RopeParams{}, 128);
  ASSERT_EQ(plain.size(), 64u);
  EXPECT_DOUBLE_EQ(plain[0], 1.0);
  EXPECT_NEAR(plain[1], 0.86596432336006535, 1e-15);    // 1e4^(-1/64)
  EXPECT_NEAR(plain[31], 0.011547819846894581, 1e-16);  // 1e4^(-62/128)

  // Llama 3.1 (theta 5e5, factor 8, low 1, high 4, original 8192), Dh 128: wavelengths
  // 2π/inv_freq below 8192/4 = 2048 keep inv_freq, above 8192/1 = 8192 divide it by 8, and the
  // band between mixes the two with s = (8192/wavelength − 1)/(4 − 1).
  const std::vector<double> scaled = rope_inv_freq(llama3_1_params(), 128);
  ASSERT_EQ(scaled.size(), 64u);
  struct Expected {
    int i;
    double inv_freq;  // after scaling
  };
  const Expected expected[] = {
      {0, 1.0},                      // wavelength 6.28: unchanged
      {28, 0.0032114459947525909},   // wavelength 1956.5 < 2048: unchanged
      {29, 0.0021665707635033591},   // wavelength 2401.7, s = 0.8036: mixed
      {31, 0.00085675141291963208},  // wavelength 3619.2, s = 0.4212: mixed
      {40, 3.4281021959525912e-05},  // wavelength 22910.6 > 8192: 0.00027424817567620730 / 8
      {63, 3.0689259889145111e-07},  // wavelength 2.56e6: 2.4551407911316089e-06 / 8
  };
  for (const Expected& e : expected) {
    EXPECT_NEAR(scaled[e.i], e.inv_freq, 1e-13 * e.inv_freq) << "i = " << e.i;
  }
  // Unchanged below the band, exactly a factor 8 above it.
  RopeParams unscaled_params;
  unscaled_params.theta = 500000.0;
  const std::vector<double> unscaled = rope_inv_freq(unscaled_params, 128);
  EXPECT_EQ(scaled[10], unscaled[10]);
  EXPECT_EQ(scaled[50], unscaled[50] / 8.0);
}

TEST_P(EveryFloatKernelSet, RopeShuffledPositionsGiveShuffledRows) {
  const int64_t N = 37, H = 3, Dh = 64, half = Dh / 2;
  const std::vector<int32_t> positions = uniform_ints(N, "rope_shuffle/positions", 1u << 20);
  const std::vector<double> x = normal_values(N * H * Dh, "rope_shuffle/x", 0.0f, 1.0f);
  // A fixed permutation: token j of the shuffled batch is token (7j + 3) mod N.
  std::vector<int64_t> source(N);
  for (int64_t j = 0; j < N; ++j) source[j] = (7 * j + 3) % N;
  std::vector<int32_t> shuffled_positions(N);
  std::vector<double> shuffled_x(x.size());
  for (int64_t j = 0; j < N; ++j) {
    shuffled_positions[j] = positions[source[j]];
    for (int64_t e = 0; e < H * Dh; ++e) shuffled_x[j * H * Dh + e] = x[source[j] * H * Dh + e];
  }
  const auto rotate = [&](const std::vector<int32_t>& pos, const std::vector<double>& in) {
    std::vector<float> cos(N * half), sin(N * half), out(in.size());
    k().rope_cos_sin(cos.data(), sin.data(), pos.data(), N, Dh, llama3_1_params());
    const auto in_f = cast<float>(in);
    k().rope_forward(out.data(), in_f.data(), cos.data(), sin.data(), N, H, Dh);
    return out;
  };
  const std::vector<float> out = rotate(positions, x);
  const std::vector<float> shuffled_out = rotate(shuffled_positions, shuffled_x);
  for (int64_t j = 0; j < N; ++j) {
    for (int64_t e = 0; e < H * Dh; ++e) {
      ASSERT_EQ(shuffled_out[j * H * Dh + e], out[source[j] * H * Dh + e]) << "token " << j;
    }
  }
}

TEST_P(EveryFloatKernelSet, CrossEntropyTinyCaseMatchesHandComputedValues) {
  // Row 0: lse = log(e + e² + e³), loss = lse − 3. Row 1: uniform over 3, weight 0.5.
  // Row 2: masked (weight 0), with a target no row could hold.
  const std::vector<float> logits = {1, 2, 3, 0, 0, 0, 5, -1, 2};
  const std::vector<int32_t> targets = {2, 1, 7};
  const std::vector<float> weights = {1.0f, 0.5f, 0.0f};
  const float d_loss = 1.0f / 1.5f;  // 1 / Σ weights
  std::vector<float> loss(3), lse(3), d_logits(9, 12345.0f);
  k().cross_entropy_forward(loss.data(), lse.data(), logits.data(), targets.data(), weights.data(),
                            3, 3);
  k().cross_entropy_backward(d_logits.data(), logits.data(), lse.data(), targets.data(),
                             weights.data(), d_loss, 3, 3);
  EXPECT_NEAR(lse[0], 3.4076059644443801, 1e-6);
  EXPECT_NEAR(lse[1], 1.0986122886681098, 1e-6);
  EXPECT_NEAR(lse[2], 5.0509457635229982, 1e-6);
  EXPECT_NEAR(loss[0], 0.40760596444438013, 1e-6);
  EXPECT_NEAR(loss[1], 0.54930614433405489, 1e-6);  // 0.5 · log 3
  EXPECT_EQ(loss[2], 0.0f);
  // d_logits = d_loss · w · (softmax − onehot).
  const double want[9] = {0.060020382113586984,
                          0.1631523140365318,
                          -0.22317269615011864,
                          0.1111111111111111,
                          -0.22222222222222224,
                          0.1111111111111111,
                          0,
                          0,
                          0};
  for (int v = 0; v < 9; ++v) EXPECT_NEAR(d_logits[v], want[v], 1e-6) << "element " << v;
  for (int v = 6; v < 9; ++v) EXPECT_EQ(d_logits[v], 0.0f) << "masked row, element " << v;
}

TEST_P(EveryFloatKernelSet, CrossEntropyMaskedRowsContributeNothing) {
  const int64_t N = 8, V = 37;
  auto logits = cast<float>(normal_values(N * V, "xent_mask/logits", 0.0f, 2.0f));
  auto targets = uniform_ints(N, "xent_mask/targets", V);
  std::vector<float> weights = {1.0f, 0.0f, 0.7f, 0.0f, 0.0f, 1.3f, 1.0f, 0.0f};
  const auto run = [&](std::vector<float>& loss, std::vector<float>& d_logits) {
    std::vector<float> lse(N);
    k().cross_entropy_forward(loss.data(), lse.data(), logits.data(), targets.data(),
                              weights.data(), N, V);
    k().cross_entropy_backward(d_logits.data(), logits.data(), lse.data(), targets.data(),
                               weights.data(), 0.25f, N, V);
  };
  std::vector<float> loss(N), d_logits(N * V);
  run(loss, d_logits);
  // Change everything about the masked rows, targets included (out of range, negative).
  const auto other = cast<float>(normal_values(N * V, "xent_mask/other", 3.0f, 5.0f));
  for (int64_t n = 0; n < N; ++n) {
    if (weights[n] != 0.0f) continue;
    for (int64_t v = 0; v < V; ++v) logits[n * V + v] = other[n * V + v];
    targets[n] = n % 2 ? -3 : int32_t(V + 100);
  }
  std::vector<float> loss2(N), d_logits2(N * V);
  run(loss2, d_logits2);
  EXPECT_EQ(loss, loss2);
  EXPECT_EQ(d_logits, d_logits2);
  for (int64_t n = 0; n < N; ++n) {
    if (weights[n] != 0.0f) continue;
    EXPECT_EQ(loss[n], 0.0f) << "row " << n;
    for (int64_t v = 0; v < V; ++v) ASSERT_EQ(d_logits[n * V + v], 0.0f) << "row " << n;
  }
}

TEST_P(EveryFloatKernelSet, OutOfRangeIndicesFailWithTheirValue) {
  const std::vector<float> table(5 * 4, 1.0f);
  std::vector<float> out(3 * 4), d_table(5 * 4);
  const std::vector<int32_t> bad_tokens = {0, 5, 1};
  EXPECT_NE(failed_check([&] {
              k().embedding_forward(out.data(), bad_tokens.data(), table.data(), 3, 4, 5);
            }).find("token id 5 at row 1 is out of range: allowed 0 <= id < vocab_size 5"),
            std::string::npos);
  const std::vector<int32_t> negative = {0, 1, -2};
  EXPECT_NE(failed_check([&] {
              k().embedding_backward(d_table.data(), out.data(), negative.data(), 3, 4, 5);
            }).find("token id -2 at row 2"),
            std::string::npos);

  const std::vector<float> logits(2 * 3, 0.0f), weights = {1.0f, 0.5f};
  const std::vector<int32_t> targets = {1, 3};
  std::vector<float> loss(2), lse(2), d_logits(6);
  EXPECT_NE(failed_check([&] {
              k().cross_entropy_forward(loss.data(), lse.data(), logits.data(), targets.data(),
                                        weights.data(), 2, 3);
            }).find("target id 3 at row 1 (weight 0.5) is out of range"),
            std::string::npos);
  EXPECT_NE(failed_check([&] {
              k().cross_entropy_backward(d_logits.data(), logits.data(), lse.data(), targets.data(),
                                         weights.data(), 1.0f, 2, 3);
            }).find("target id 3 at row 1"),
            std::string::npos);
}

TEST_P(EveryFloatKernelSet, MatmulWithoutInputGradientStillAccumulatesWeights) {
  const int64_t N = 9, I = 21, O = 18;
  const auto in = cast<float>(normal_values(N * I, "matmul_null/in", 0.0f, 1.0f));
  const auto weight = cast<float>(normal_values(O * I, "matmul_null/weight", 0.0f, 1.0f));
  const auto d_out = cast<float>(normal_values(N * O, "matmul_null/d_out", 0.0f, 1.0f));
  const auto d_weight0 = cast<float>(normal_values(O * I, "matmul_null/d_weight0", 0.0f, 1.0f));
  std::vector<float> d_in(N * I);
  auto with_input = d_weight0, without = d_weight0, without_accumulate = d_weight0;
  k().matmul_backward(d_in.data(), with_input.data(), d_out.data(), in.data(), weight.data(), N, I,
                      O);
  k().matmul_backward(nullptr, without.data(), d_out.data(), in.data(), weight.data(), N, I, O);
  k().matmul_backward_accumulate_input(nullptr, without_accumulate.data(), d_out.data(), in.data(),
                                       weight.data(), N, I, O);
  EXPECT_EQ(without, with_input);
  EXPECT_EQ(without_accumulate, with_input);
  EXPECT_NE(with_input, d_weight0);
}

// Every in-place use the headers allow gives the same bits as the out-of-place call.
TEST_P(EveryFloatKernelSet, InPlaceCallsMatchOutOfPlace) {
  const int64_t N = 11, H = 2, Dh = 40, F = 53, V = 29;
  {
    const std::vector<int32_t> positions = uniform_ints(N, "alias/positions", 100000);
    std::vector<float> cos(N * Dh / 2), sin(N * Dh / 2);
    k().rope_cos_sin(cos.data(), sin.data(), positions.data(), N, Dh, RopeParams{});
    const auto x = cast<float>(normal_values(N * H * Dh, "alias/x", 0.0f, 1.0f));
    std::vector<float> out(x.size()), in_place = x;
    k().rope_forward(out.data(), x.data(), cos.data(), sin.data(), N, H, Dh);
    k().rope_forward(in_place.data(), in_place.data(), cos.data(), sin.data(), N, H, Dh);
    EXPECT_EQ(in_place, out) << "rope_forward";
    k().rope_backward(out.data(), x.data(), cos.data(), sin.data(), N, H, Dh);
    in_place = x;
    k().rope_backward(in_place.data(), in_place.data(), cos.data(), sin.data(), N, H, Dh);
    EXPECT_EQ(in_place, out) << "rope_backward";
  }
  {
    const auto gate = cast<float>(normal_values(N * F, "alias/gate", 0.0f, 3.0f));
    const auto up = cast<float>(normal_values(N * F, "alias/up", 0.0f, 1.0f));
    const auto d_out = cast<float>(normal_values(N * F, "alias/d_out", 0.0f, 1.0f));
    std::vector<float> d_gate(N * F), d_up(N * F);
    k().swiglu_backward(d_gate.data(), d_up.data(), d_out.data(), gate.data(), up.data(), N, F);
    auto gate_in_place = gate, up_in_place = up;
    k().swiglu_backward(gate_in_place.data(), up_in_place.data(), d_out.data(),
                        gate_in_place.data(), up_in_place.data(), N, F);
    EXPECT_EQ(gate_in_place, d_gate) << "swiglu_backward d_gate";
    EXPECT_EQ(up_in_place, d_up) << "swiglu_backward d_up";
  }
  {
    const auto logits = cast<float>(normal_values(N * V, "alias/logits", 0.0f, 2.0f));
    const auto targets = uniform_ints(N, "alias/targets", V);
    const std::vector<float> weights(N, 1.0f);
    std::vector<float> loss(N), lse(N), d_logits(N * V);
    k().cross_entropy_forward(loss.data(), lse.data(), logits.data(), targets.data(),
                              weights.data(), N, V);
    k().cross_entropy_backward(d_logits.data(), logits.data(), lse.data(), targets.data(),
                               weights.data(), 0.1f, N, V);
    auto in_place = logits;
    k().cross_entropy_backward(in_place.data(), in_place.data(), lse.data(), targets.data(),
                               weights.data(), 0.1f, N, V);
    EXPECT_EQ(in_place, d_logits) << "cross_entropy_backward";
  }
  {
    const int64_t n = 1000;
    const auto a = cast<float>(normal_values(n, "alias/a", 0.0f, 1.0f));
    const auto b = cast<float>(normal_values(n, "alias/b", 0.0f, 1.0f));
    std::vector<float> sum(n), scaled(n);
    k().add(sum.data(), a.data(), b.data(), n);
    k().scale(scaled.data(), a.data(), 1.7f, n);
    auto into_a = a, into_b = b, scaled_in_place = a;
    k().add(into_a.data(), into_a.data(), b.data(), n);
    k().add(into_b.data(), a.data(), into_b.data(), n);
    k().scale(scaled_in_place.data(), scaled_in_place.data(), 1.7f, n);
    EXPECT_EQ(into_a, sum) << "add into a";
    EXPECT_EQ(into_b, sum) << "add into b";
    EXPECT_EQ(scaled_in_place, scaled) << "scale";
  }
}

TEST(HostTransfers, RoundTripThroughTheBackendIsExact) {
  const Kernels& k = backend(Device::kCpu);
  const std::vector<int32_t> host = {3, -1, 7, 2147483647};
  Tensor on_backend = k.empty(Shape{4});
  k.copy_from_host(on_backend.view().raw(), host.data(), host.size() * sizeof(int32_t));
  std::vector<int32_t> back(host.size(), 0);
  k.copy_to_host(back.data(), on_backend.view().raw(), back.size() * sizeof(int32_t));
  EXPECT_EQ(back, host);
}

}  // namespace
}  // namespace maxctx::kernels

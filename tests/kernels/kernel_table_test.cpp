// The kernel table: one list of cases (op × shape), run against every implementation.
//
// For every case:
//  1. each float implementation (ref<float>, cpu) against the oracle, ref<double> on the same
//     inputs: all forward outputs and all gradients, within 1e-5 (metrics in test_util.h).
//     Parameter gradients start from random values (they must accumulate); activation
//     gradients start from garbage (they must be overwritten).
//  2. ref<double>'s gradients against central finite differences of L = Σ cotangent · output,
//     for every differentiable input, within 1e-6 (cases small enough to afford it).
//  3. cpu with 2 threads gives the same bits as with 1 (BLAS ops: the same bits twice).
// A new kernel adds an op runner below and rows in all_cases(), not a new kind of test.
#include <cblas.h>
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <ostream>
#include <string>
#include <utility>
#include <vector>

#include "kernels/kernel_sets.h"
#include "kernels/test_util.h"
#include "maxctx/core/rng.h"

namespace maxctx::kernels {
namespace {

using testing_util::cast;
using testing_util::close;
using testing_util::Metric;
using testing_util::normal_values;
using testing_util::uniform_ints;
using testing_util::uniform_values;
using testing_util::widen;

constexpr double kFloatTolerance = 1e-5;
constexpr double kFiniteDifferenceTolerance = 1e-6;
// What activation-gradient buffers hold before a backward call: must be overwritten.
constexpr float kGarbage = 12345.0f;

struct Inputs {
  std::map<std::string, std::vector<double>> real;  // exactly representable in float
  std::map<std::string, std::vector<int32_t>> ints;
  // Initial content of the gradients that accumulate, keyed by the gradient's name.
  std::map<std::string, std::vector<double>> grad_init;
  // Inputs with a gradient; the gradient of x is the output named "d_" + x.
  std::vector<std::string> differentiable;
  // L = Σ output · cotangent over these (output, cotangent) pairs; a one-element cotangent
  // broadcasts (the cross-entropy's scalar d_loss).
  std::vector<std::pair<std::string, std::string>> loss;
};

struct Output {
  std::vector<double> values;
  int64_t row;  // elements per row, for the metric
  Metric metric;
};
using Outputs = std::map<std::string, Output>;

template <typename T>
Output output(const std::vector<T>& values, int64_t row, Metric metric = Metric::kRowRelative) {
  return {widen(values), row, metric};
}

enum class Pass { kForward, kForwardBackward };

struct Case;

struct OpRunner {
  const char* name;
  Inputs (*make_inputs)(const Case&);
  Outputs (*run_float)(const KernelSet<float>&, const Case&, const Inputs&, Pass);
  Outputs (*run_double)(const KernelSet<double>&, const Case&, const Inputs&, Pass);
  bool same_bits_on_any_thread_count;  // false where OpenBLAS partitions the work
};

// Sizes, read by each op as its comment says.
struct Case {
  const OpRunner* op;
  int64_t n;  // token rows (elementwise: elements)
  int64_t d;  // the row: in_dim, model dim, head_dim, ffn dim, vocab (cross-entropy)
  int64_t m;  // a second size: out_dim, vocab (embedding), heads (rope); 1 where unused
  std::string name() const { return fmt::format("{}_n{}_d{}_m{}", op->name, n, d, m); }
  std::string stream(const char* array) const { return name() + "/" + array; }
};

void PrintTo(const Case& c, std::ostream* os) { *os << c.name(); }

template <typename Op>
OpRunner runner_of(bool same_bits_on_any_thread_count = true) {
  return {Op::kName, &Op::make_inputs, &Op::template run<float>, &Op::template run<double>,
          same_bits_on_any_thread_count};
}

// ---------------------------------------------------------------------------------------------
// Op runners. make_inputs draws the case's data; run<T> calls one implementation's forward and
// (for kForwardBackward) backward and returns every output by name.

// matmul: N = n, in_dim = d, out_dim = m.
template <bool kAccumulateInput>
struct MatmulOp {
  static constexpr const char* kName = kAccumulateInput ? "matmul_accumulate_input" : "matmul";
  static Inputs make_inputs(const Case& c) {
    Inputs in;
    in.real["in"] = normal_values(c.n * c.d, c.stream("in"), 0.0f, 1.0f);
    in.real["weight"] = normal_values(c.m * c.d, c.stream("weight"), 0.0f, 0.2f);
    in.real["d_out"] = normal_values(c.n * c.m, c.stream("d_out"), 0.0f, 1.0f);
    in.grad_init["d_weight"] = normal_values(c.m * c.d, c.stream("d_weight0"), 0.0f, 1.0f);
    if (kAccumulateInput) {
      in.grad_init["d_in"] = normal_values(c.n * c.d, c.stream("d_in0"), 0.0f, 1.0f);
    }
    in.differentiable = {"in", "weight"};
    in.loss = {{"out", "d_out"}};
    return in;
  }
  template <typename T>
  static Outputs run(const KernelSet<T>& k, const Case& c, const Inputs& in, Pass pass) {
    const auto x = cast<T>(in.real.at("in"));
    const auto weight = cast<T>(in.real.at("weight"));
    std::vector<T> out(c.n * c.m);
    k.matmul_forward(out.data(), x.data(), weight.data(), c.n, c.d, c.m);
    Outputs result = {{"out", output(out, c.m, Metric::kRowNorm)}};
    if (pass == Pass::kForward) return result;
    const auto d_out = cast<T>(in.real.at("d_out"));
    auto d_weight = cast<T>(in.grad_init.at("d_weight"));
    if (kAccumulateInput) {
      auto d_in = cast<T>(in.grad_init.at("d_in"));
      k.matmul_backward_accumulate_input(d_in.data(), d_weight.data(), d_out.data(), x.data(),
                                         weight.data(), c.n, c.d, c.m);
      result["d_in"] = output(d_in, c.d, Metric::kRowNorm);
    } else {
      std::vector<T> d_in(c.n * c.d, T(kGarbage));
      k.matmul_backward(d_in.data(), d_weight.data(), d_out.data(), x.data(), weight.data(), c.n,
                        c.d, c.m);
      result["d_in"] = output(d_in, c.d, Metric::kRowNorm);
    }
    result["d_weight"] = output(d_weight, c.d, Metric::kRowNorm);
    return result;
  }
};

// embedding: N = n, D = d, V = m; tokens repeat whenever N > V.
struct EmbeddingOp {
  static constexpr const char* kName = "embedding";
  static Inputs make_inputs(const Case& c) {
    Inputs in;
    in.ints["tokens"] = uniform_ints(c.n, c.stream("tokens"), uint32_t(c.m));
    in.real["table"] = normal_values(c.m * c.d, c.stream("table"), 0.0f, 1.0f);
    in.real["d_out"] = normal_values(c.n * c.d, c.stream("d_out"), 0.0f, 1.0f);
    in.grad_init["d_table"] = normal_values(c.m * c.d, c.stream("d_table0"), 0.0f, 1.0f);
    in.differentiable = {"table"};
    in.loss = {{"out", "d_out"}};
    return in;
  }
  template <typename T>
  static Outputs run(const KernelSet<T>& k, const Case& c, const Inputs& in, Pass pass) {
    const auto& tokens = in.ints.at("tokens");
    const auto table = cast<T>(in.real.at("table"));
    std::vector<T> out(c.n * c.d);
    k.embedding_forward(out.data(), tokens.data(), table.data(), c.n, c.d, c.m);
    Outputs result = {{"out", output(out, c.d)}};
    if (pass == Pass::kForward) return result;
    const auto d_out = cast<T>(in.real.at("d_out"));
    auto d_table = cast<T>(in.grad_init.at("d_table"));
    k.embedding_backward(d_table.data(), d_out.data(), tokens.data(), c.n, c.d, c.m);
    result["d_table"] = output(d_table, c.d);
    return result;
  }
};

// rmsnorm: N = n, D = d.
struct RmsnormOp {
  static constexpr const char* kName = "rmsnorm";
  static constexpr float kEps = 1e-5f;
  static Inputs make_inputs(const Case& c) {
    Inputs in;
    in.real["in"] = normal_values(c.n * c.d, c.stream("in"), 0.0f, 1.0f);
    in.real["weight"] = uniform_values(c.d, c.stream("weight"), 0.5f, 1.5f);
    in.real["d_out"] = normal_values(c.n * c.d, c.stream("d_out"), 0.0f, 1.0f);
    in.grad_init["d_weight"] = normal_values(c.d, c.stream("d_weight0"), 0.0f, 1.0f);
    in.differentiable = {"in", "weight"};
    in.loss = {{"out", "d_out"}};
    return in;
  }
  template <typename T>
  static Outputs run(const KernelSet<T>& k, const Case& c, const Inputs& in, Pass pass) {
    const auto x = cast<T>(in.real.at("in"));
    const auto weight = cast<T>(in.real.at("weight"));
    std::vector<T> out(c.n * c.d);
    std::vector<T> rstd(c.n);
    k.rmsnorm_forward(out.data(), rstd.data(), x.data(), weight.data(), c.n, c.d, T(kEps));
    Outputs result = {{"out", output(out, c.d)}, {"rstd", output(rstd, 1)}};
    if (pass == Pass::kForward) return result;
    const auto d_out = cast<T>(in.real.at("d_out"));
    std::vector<T> d_in(c.n * c.d, T(kGarbage));
    auto d_weight = cast<T>(in.grad_init.at("d_weight"));
    k.rmsnorm_backward(d_in.data(), d_weight.data(), d_out.data(), x.data(), weight.data(),
                       rstd.data(), c.n, c.d);
    result["d_in"] = output(d_in, c.d);
    result["d_weight"] = output(d_weight, c.d);
    return result;
  }
};

// rope: N = n, head_dim = d, H = m. Plain: theta 1e4, positions < 8192. Llama3: theta 5e5 with
// Llama 3.1 scaling, positions up to 2^20 (long context, where float angles would fail).
template <bool kLlama3>
struct RopeOp {
  static constexpr const char* kName = kLlama3 ? "rope_llama3" : "rope";
  static RopeParams params() {
    RopeParams p;
    if (kLlama3) {
      p.theta = 500000.0;
      p.scaling = RopeScaling::kLlama3;
    }
    return p;
  }
  static Inputs make_inputs(const Case& c) {
    Inputs in;
    in.ints["positions"] = uniform_ints(c.n, c.stream("positions"), kLlama3 ? 1u << 20 : 8192u);
    in.real["x"] = normal_values(c.n * c.m * c.d, c.stream("x"), 0.0f, 1.0f);
    in.real["d_out"] = normal_values(c.n * c.m * c.d, c.stream("d_out"), 0.0f, 1.0f);
    in.differentiable = {"x"};
    in.loss = {{"out", "d_out"}};
    return in;
  }
  template <typename T>
  static Outputs run(const KernelSet<T>& k, const Case& c, const Inputs& in, Pass pass) {
    const int64_t half = c.d / 2;
    std::vector<T> cos(c.n * half);
    std::vector<T> sin(c.n * half);
    k.rope_cos_sin(cos.data(), sin.data(), in.ints.at("positions").data(), c.n, c.d, params());
    const auto x = cast<T>(in.real.at("x"));
    std::vector<T> out(x.size());
    k.rope_forward(out.data(), x.data(), cos.data(), sin.data(), c.n, c.m, c.d);
    Outputs result = {
        {"cos", output(cos, half)}, {"sin", output(sin, half)}, {"out", output(out, c.d)}};
    if (pass == Pass::kForward) return result;
    const auto d_out = cast<T>(in.real.at("d_out"));
    std::vector<T> d_x(x.size(), T(kGarbage));
    k.rope_backward(d_x.data(), d_out.data(), cos.data(), sin.data(), c.n, c.m, c.d);
    result["d_x"] = output(d_x, c.d);
    return result;
  }
};

// swiglu: N = n, F = d. Gates reach ±90 so that the sigmoid's saturated ends are exercised.
struct SwigluOp {
  static constexpr const char* kName = "swiglu";
  static Inputs make_inputs(const Case& c) {
    Inputs in;
    in.real["gate"] = normal_values(c.n * c.d, c.stream("gate"), 0.0f, 3.0f);
    auto& gate = in.real["gate"];
    if (gate.size() >= 4) {
      gate[1] = -90.0;
      gate[2] = 90.0;
      gate[gate.size() - 1] = -20.0;
    }
    in.real["up"] = normal_values(c.n * c.d, c.stream("up"), 0.0f, 1.0f);
    in.real["d_out"] = normal_values(c.n * c.d, c.stream("d_out"), 0.0f, 1.0f);
    in.differentiable = {"gate", "up"};
    in.loss = {{"out", "d_out"}};
    return in;
  }
  template <typename T>
  static Outputs run(const KernelSet<T>& k, const Case& c, const Inputs& in, Pass pass) {
    const auto gate = cast<T>(in.real.at("gate"));
    const auto up = cast<T>(in.real.at("up"));
    std::vector<T> out(gate.size());
    k.swiglu_forward(out.data(), gate.data(), up.data(), c.n, c.d);
    Outputs result = {{"out", output(out, c.d)}};
    if (pass == Pass::kForward) return result;
    const auto d_out = cast<T>(in.real.at("d_out"));
    std::vector<T> d_gate(gate.size(), T(kGarbage));
    std::vector<T> d_up(gate.size(), T(kGarbage));
    k.swiglu_backward(d_gate.data(), d_up.data(), d_out.data(), gate.data(), up.data(), c.n, c.d);
    result["d_gate"] = output(d_gate, c.d);
    result["d_up"] = output(d_up, c.d);
    return result;
  }
};

// cross-entropy: N = n, V = d. Every third row is masked (weight 0, target −1: never read);
// the others have weights in [0.5, 1.5]; row 0 is shifted by +100 (exp would overflow unshifted).
struct CrossEntropyOp {
  static constexpr const char* kName = "cross_entropy";
  static Inputs make_inputs(const Case& c) {
    Inputs in;
    in.real["logits"] = normal_values(c.n * c.d, c.stream("logits"), 0.0f, 2.0f);
    for (int64_t v = 0; v < c.d; ++v) {
      in.real["logits"][v] = double(float(in.real["logits"][v] + 100.0));
    }
    in.ints["targets"] = uniform_ints(c.n, c.stream("targets"), uint32_t(c.d));
    in.real["weights"] = uniform_values(c.n, c.stream("weights"), 0.5f, 1.5f);
    double total_weight = 0.0;
    for (int64_t i = 0; i < c.n; ++i) {
      if (i % 3 == 1) {
        in.real["weights"][i] = 0.0;
        in.ints["targets"][i] = -1;
      }
      total_weight += in.real["weights"][i];
    }
    in.real["d_loss"] = {double(float(1.0 / total_weight))};
    in.differentiable = {"logits"};
    in.loss = {{"loss", "d_loss"}};
    return in;
  }
  template <typename T>
  static Outputs run(const KernelSet<T>& k, const Case& c, const Inputs& in, Pass pass) {
    const auto logits = cast<T>(in.real.at("logits"));
    const auto weights = cast<T>(in.real.at("weights"));
    const auto& targets = in.ints.at("targets");
    std::vector<T> loss(c.n);
    std::vector<T> lse(c.n);
    k.cross_entropy_forward(loss.data(), lse.data(), logits.data(), targets.data(), weights.data(),
                            c.n, c.d);
    Outputs result = {{"loss", output(loss, 1)}, {"lse", output(lse, 1)}};
    if (pass == Pass::kForward) return result;
    std::vector<T> d_logits(logits.size(), T(kGarbage));
    k.cross_entropy_backward(d_logits.data(), logits.data(), lse.data(), targets.data(),
                             weights.data(), T(in.real.at("d_loss")[0]), c.n, c.d);
    result["d_logits"] = output(d_logits, c.d);
    return result;
  }
};

// elementwise helpers: n elements. No gradients (the model differentiates them by hand).
struct ElementwiseOp {
  static constexpr const char* kName = "elementwise";
  static constexpr float kAlpha = 0.3712f;
  static Inputs make_inputs(const Case& c) {
    Inputs in;
    in.real["a"] = normal_values(c.n, c.stream("a"), 0.0f, 1.0f);
    in.real["b"] = normal_values(c.n, c.stream("b"), 0.0f, 1.0f);
    return in;
  }
  template <typename T>
  static Outputs run(const KernelSet<T>& k, const Case& c, const Inputs& in, Pass) {
    const auto a = cast<T>(in.real.at("a"));
    const auto b = cast<T>(in.real.at("b"));
    std::vector<T> sum(c.n, T(kGarbage));
    k.add(sum.data(), a.data(), b.data(), c.n);
    auto acc = a;
    k.add_inplace(acc.data(), b.data(), c.n);
    std::vector<T> scaled(c.n, T(kGarbage));
    k.scale(scaled.data(), a.data(), T(kAlpha), c.n);
    std::vector<T> zeros(c.n, T(kGarbage));
    k.fill_zero(zeros.data(), c.n);
    const std::vector<double> sum_of_squares = {k.sum_of_squares(a.data(), c.n)};
    return {{"add", output(sum, 1)},
            {"add_inplace", output(acc, 1)},
            {"scale", output(scaled, 1)},
            {"fill_zero", output(zeros, 1)},
            {"sum_of_squares", output(sum_of_squares, 1)}};
  }
};

const OpRunner kMatmul = runner_of<MatmulOp<false>>(false);
const OpRunner kMatmulAccumulateInput = runner_of<MatmulOp<true>>(false);
const OpRunner kEmbedding = runner_of<EmbeddingOp>();
const OpRunner kRmsnorm = runner_of<RmsnormOp>();
const OpRunner kRope = runner_of<RopeOp<false>>();
const OpRunner kRopeLlama3 = runner_of<RopeOp<true>>();
const OpRunner kSwiglu = runner_of<SwigluOp>();
const OpRunner kCrossEntropy = runner_of<CrossEntropyOp>();
const OpRunner kElementwise = runner_of<ElementwiseOp>();

// The table. Sizes include 1, odd sizes, sizes one off a multiple of the vector width (16
// floats on AVX-512) and cases large enough to split between threads.
std::vector<Case> all_cases() {
  return {
      {&kMatmul, 1, 1, 1},
      {&kMatmul, 3, 5, 7},
      {&kMatmul, 17, 33, 9},
      {&kMatmul, 13, 300, 65},
      {&kMatmul, 128, 512, 256},
      {&kMatmul, 1, 7, 3},   // one token row: the matrix-vector path, shorter than a vector
      {&kMatmul, 1, 48, 9},  // pairs of vectors, one more vector, groups of four rows and one
      {&kMatmul, 1, 1000, 37},
      {&kMatmulAccumulateInput, 5, 17, 3},
      {&kMatmulAccumulateInput, 31, 64, 33},
      {&kEmbedding, 1, 1, 1},
      {&kEmbedding, 7, 33, 5},
      {&kEmbedding, 300, 1000, 50},
      {&kRmsnorm, 1, 2, 1},  // not D = 1: there d_in is O(eps), all cancellation
      {&kRmsnorm, 3, 7, 1},
      {&kRmsnorm, 5, 33, 1},
      {&kRmsnorm, 16, 1027, 1},
      {&kRmsnorm, 64, 4096, 1},
      {&kRope, 1, 2, 1},
      {&kRope, 5, 10, 3},
      {&kRope, 6, 40, 3},  // half head 20: one vector and a tail
      {&kRope, 9, 64, 4},
      {&kRope, 33, 128, 2},
      {&kRopeLlama3, 7, 128, 2},
      {&kRopeLlama3, 300, 64, 8},
      {&kSwiglu, 1, 1, 1},
      {&kSwiglu, 3, 17, 1},
      {&kSwiglu, 8, 1001, 1},
      {&kSwiglu, 64, 2051, 1},
      {&kCrossEntropy, 1, 1, 1},
      {&kCrossEntropy, 4, 5, 1},
      {&kCrossEntropy, 9, 100, 1},
      {&kCrossEntropy, 6, 4099, 1},
      {&kCrossEntropy, 3, 32003, 1},
      {&kCrossEntropy, 64, 5003, 1},
      {&kElementwise, 1, 1, 1},
      {&kElementwise, 15, 1, 1},
      {&kElementwise, 17, 1, 1},
      {&kElementwise, 1000, 1, 1},
      {&kElementwise, 100003, 1, 1},
  };
}

// Finite differences cost two forward passes per checked coordinate: cases up to this size
// check (a sample of) every input; larger ones are covered by the oracle comparison.
constexpr int64_t kMaxFiniteDifferenceSize = 300000;
constexpr int kCoordinatesPerInput = 24;

std::vector<Case> finite_difference_cases() {
  std::vector<Case> cases;
  for (const Case& c : all_cases()) {
    if (c.op != &kElementwise && c.n * c.d * c.m <= kMaxFiniteDifferenceSize) cases.push_back(c);
  }
  return cases;
}

// ---------------------------------------------------------------------------------------------

class KernelTable : public ::testing::TestWithParam<std::tuple<int, Case>> {};

TEST_P(KernelTable, MatchesDoubleOracle) {
  const KernelSet<float>& impl = *float_kernel_sets()[std::get<0>(GetParam())];
  const Case& c = std::get<1>(GetParam());
  const Inputs in = c.op->make_inputs(c);
  const Outputs want = c.op->run_double(ref_kernels<double>(), c, in, Pass::kForwardBackward);
  const Outputs got = c.op->run_float(impl, c, in, Pass::kForwardBackward);
  ASSERT_EQ(got.size(), want.size());
  for (const auto& [name, reference] : want) {
    EXPECT_TRUE(close(got.at(name).values, reference.values, reference.row, reference.metric,
                      kFloatTolerance))
        << impl.name << " " << c.name() << ": output " << name;
  }
}

INSTANTIATE_TEST_SUITE_P(AllCases, KernelTable,
                         ::testing::Combine(::testing::Range(0, int(float_kernel_sets().size())),
                                            ::testing::ValuesIn(all_cases())),
                         [](const ::testing::TestParamInfo<KernelTable::ParamType>& param_info) {
                           return std::string(
                                      float_kernel_sets()[std::get<0>(param_info.param)]->name) +
                                  "_" + std::get<1>(param_info.param).name();
                         });

double loss_of(const Outputs& outputs, const Inputs& in) {
  double loss = 0.0;
  for (const auto& [output_name, cotangent_name] : in.loss) {
    const std::vector<double>& y = outputs.at(output_name).values;
    const std::vector<double>& g = in.real.at(cotangent_name);
    for (size_t k = 0; k < y.size(); ++k) loss += y[k] * (g.size() == 1 ? g[0] : g[k]);
  }
  return loss;
}

// Always the first and last coordinates, then a deterministic sample.
std::vector<size_t> coordinates_to_check(size_t size, const std::string& stream) {
  if (size <= size_t(kCoordinatesPerInput)) {
    std::vector<size_t> all(size);
    for (size_t k = 0; k < size; ++k) all[k] = k;
    return all;
  }
  std::vector<size_t> picked = {0, size - 1};
  for (int k = 0; k < kCoordinatesPerInput - 2; ++k) {
    picked.push_back(rng::u32_at(testing_util::kSeed, rng::stream_id(stream), k) % size);
  }
  return picked;
}

class FiniteDifferences : public ::testing::TestWithParam<Case> {};

TEST_P(FiniteDifferences, RefDoubleGradientsMatch) {
  const Case& c = GetParam();
  Inputs in = c.op->make_inputs(c);
  // Start accumulating gradients from zero, so the outputs are the gradients themselves.
  for (auto& [name, init] : in.grad_init) std::fill(init.begin(), init.end(), 0.0);
  const KernelSet<double>& oracle = ref_kernels<double>();
  const Outputs analytic = c.op->run_double(oracle, c, in, Pass::kForwardBackward);
  for (const std::string& x : in.differentiable) {
    const Output& gradient = analytic.at("d_" + x);
    const size_t row = size_t(gradient.row);
    Inputs perturbed = in;
    std::vector<double>& values = perturbed.real.at(x);
    for (const size_t k : coordinates_to_check(values.size(), c.stream(x.c_str()))) {
      const double original = values[k];
      const double step = 1e-5 * std::max(1.0, std::abs(original));
      values[k] = original + step;
      const double loss_plus = loss_of(c.op->run_double(oracle, c, perturbed, Pass::kForward), in);
      values[k] = original - step;
      const double loss_minus = loss_of(c.op->run_double(oracle, c, perturbed, Pass::kForward), in);
      values[k] = original;
      const double numeric = (loss_plus - loss_minus) / (2.0 * step);
      // The metric of test_util.h, row-relative, on the gradient's row.
      const size_t begin = k / row * row;
      double row_scale = 0.0;
      for (size_t j = begin; j < std::min(gradient.values.size(), begin + row); ++j) {
        row_scale = std::max(row_scale, std::abs(gradient.values[j]));
      }
      const double want = gradient.values[k];
      EXPECT_LE(std::abs(numeric - want),
                kFiniteDifferenceTolerance * std::max(std::abs(want), row_scale))
          << c.name() << ": d_" << x << "[" << k << "] analytic " << want << ", numeric " << numeric
          << ", row scale " << row_scale;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(SmallCases, FiniteDifferences,
                         ::testing::ValuesIn(finite_difference_cases()),
                         [](const ::testing::TestParamInfo<Case>& param_info) {
                           return param_info.param.name();
                         });

// Sets the OpenMP and OpenBLAS thread counts for one scope (ctest runs with one of each).
class ThreadCount {
 public:
  explicit ThreadCount(int threads)
      : omp_threads_(omp_get_max_threads()), blas_threads_(openblas_get_num_threads()) {
    omp_set_num_threads(threads);
    openblas_set_num_threads(threads);
  }
  ~ThreadCount() {
    omp_set_num_threads(omp_threads_);
    openblas_set_num_threads(blas_threads_);
  }
  ThreadCount(const ThreadCount&) = delete;
  ThreadCount& operator=(const ThreadCount&) = delete;

 private:
  int omp_threads_;
  int blas_threads_;
};

class CpuDeterminism : public ::testing::TestWithParam<Case> {};

TEST_P(CpuDeterminism, SameBitsOnOneAndTwoThreads) {
  const Case& c = GetParam();
  const Inputs in = c.op->make_inputs(c);
  Outputs first;
  {
    ThreadCount threads(c.op->same_bits_on_any_thread_count ? 1 : 2);
    first = c.op->run_float(cpu_kernels(), c, in, Pass::kForwardBackward);
  }
  ThreadCount threads(2);
  const Outputs second = c.op->run_float(cpu_kernels(), c, in, Pass::kForwardBackward);
  for (const auto& [name, values] : first) {
    // Compared as float bit patterns: every value is a widened float, or the sum of squares.
    EXPECT_EQ(values.values, second.at(name).values) << c.name() << ": output " << name;
  }
}

INSTANTIATE_TEST_SUITE_P(AllCases, CpuDeterminism, ::testing::ValuesIn(all_cases()),
                         [](const ::testing::TestParamInfo<Case>& param_info) {
                           return param_info.param.name();
                         });

}  // namespace
}  // namespace maxctx::kernels

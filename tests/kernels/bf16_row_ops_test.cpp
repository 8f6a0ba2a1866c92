// The row and elementwise ops of the cpu op table in every f32/bf16 mix of their float views
// (kernels.h's precision contract), against the double reference.
//
// One table of cases; each case runs every dtype mix of its float operands:
//   1. against ref<double> on the *bf16-rounded* inputs: the only error left is fp32 arithmetic
//      (|a − b| ≤ 1e-5·max|b| over the row, as for fp32) plus the single rounding of a bf16
//      output (≤ 2^-8·|b|, half a bf16 ulp);
//   2. against ref<double> on the unrounded inputs, rtol 2e-2 of the row's max: the semantics;
//   3. on 1 and 2 threads: the same bits.
// Then the rounding itself (bit-exact against core/dtype.h's float_to_bf16, NaN included), the
// in-place forms, AdamW shards, the int8 row quantizers and the errors for unsupported dtypes.
#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "kernels/test_util.h"
#include "maxctx/core/check.h"
#include "maxctx/core/dtype.h"
#include "maxctx/core/tensor.h"
#include "maxctx/kernels/cpu/elementwise.h"
#include "maxctx/kernels/kernels.h"
#include "maxctx/kernels/ref/cross_entropy.h"
#include "maxctx/kernels/ref/elementwise.h"
#include "maxctx/kernels/ref/embedding.h"
#include "maxctx/kernels/ref/int8.h"
#include "maxctx/kernels/ref/rmsnorm.h"
#include "maxctx/kernels/ref/rope.h"
#include "maxctx/kernels/ref/swiglu.h"

namespace maxctx::kernels {
namespace {

using testing_util::normal_values;
using testing_util::uniform_ints;
using testing_util::uniform_values;
using Arrays = std::vector<std::vector<double>>;

const Kernels& cpu() { return backend(Device::kCpu); }

// One operand's values held in its dtype.
class Storage {
 public:
  Storage(DType dtype, const std::vector<double>& values) : dtype_(dtype) {
    if (dtype == DType::kBF16) {
      for (const double v : values) bf16_.push_back(float_to_bf16(float(v)));
    } else {
      f32_.assign(values.begin(), values.end());
    }
  }
  TensorView view(const Shape& shape) {
    void* data = dtype_ == DType::kBF16 ? static_cast<void*>(bf16_.data()) : f32_.data();
    return TensorView(data, dtype_, shape);
  }
  std::vector<double> values() const {
    if (dtype_ == DType::kF32) return std::vector<double>(f32_.begin(), f32_.end());
    std::vector<double> out;
    for (const bf16 v : bf16_) out.push_back(bf16_to_float(v));
    return out;
  }
  bool same_bits(const Storage& other) const {
    // (memcmp of an empty vector's null data() is undefined even for 0 bytes: UBSan.)
    return f32_.size() == other.f32_.size() && bf16_.size() == other.bf16_.size() &&
           (f32_.empty() ||
            std::memcmp(f32_.data(), other.f32_.data(), f32_.size() * sizeof(float)) == 0) &&
           (bf16_.empty() ||
            std::memcmp(bf16_.data(), other.bf16_.data(), bf16_.size() * sizeof(bf16)) == 0);
  }

 private:
  DType dtype_;
  std::vector<float> f32_;
  std::vector<bf16> bf16_;
};

struct Operand {
  const char* name;
  Shape shape;
  bool output;     // written (overwritten or accumulated) by the op
  bool any_float;  // f32 or bf16; false: f32 only (statistics, parameter gradients)
  std::vector<double> values;
};

struct OpCase {
  std::string name;
  int64_t row;  // elements per row of the accuracy metric
  std::vector<Operand> operands;
  std::function<void(const std::vector<TensorView>&)> run;  // through the op table
  std::function<void(Arrays&)> reference;                   // ref<double>, operands in order
};

// |got − want| ≤ elem_tol·|want| + row_tol·max |want| over the row.
::testing::AssertionResult within(const std::vector<double>& got, const std::vector<double>& want,
                                  int64_t row, double elem_tol, double row_tol) {
  for (size_t begin = 0; begin < want.size(); begin += size_t(row)) {
    const size_t end = std::min(want.size(), begin + size_t(row));
    double row_max = 0.0;
    for (size_t k = begin; k < end; ++k) row_max = std::max(row_max, std::fabs(want[k]));
    for (size_t k = begin; k < end; ++k) {
      const double allowed = elem_tol * std::fabs(want[k]) + row_tol * row_max;
      if (!(std::fabs(got[k] - want[k]) <= allowed)) {
        return ::testing::AssertionFailure() << "element " << k << ": got " << got[k] << ", want "
                                             << want[k] << ", allowed error " << allowed;
      }
    }
  }
  return ::testing::AssertionSuccess();
}

class ThreadCount {
 public:
  explicit ThreadCount(int threads) : saved_(omp_get_max_threads()) {
    omp_set_num_threads(threads);
  }
  ~ThreadCount() { omp_set_num_threads(saved_); }
  ThreadCount(const ThreadCount&) = delete;
  ThreadCount& operator=(const ThreadCount&) = delete;

 private:
  int saved_;
};

std::vector<Storage> run_case(const OpCase& c, const std::vector<DType>& dtypes, int threads) {
  std::vector<Storage> storage;
  for (size_t i = 0; i < c.operands.size(); ++i)
    storage.emplace_back(dtypes[i], c.operands[i].values);
  std::vector<TensorView> views;
  for (size_t i = 0; i < c.operands.size(); ++i)
    views.push_back(storage[i].view(c.operands[i].shape));
  ThreadCount thread_count(threads);
  c.run(views);
  return storage;
}

void check_every_mix(const OpCase& c) {
  std::vector<size_t> mixed;  // operands that may be bf16
  for (size_t i = 0; i < c.operands.size(); ++i) {
    if (c.operands[i].any_float) mixed.push_back(i);
  }
  for (uint32_t mask = 0; mask < (1u << mixed.size()); ++mask) {
    std::vector<DType> dtypes(c.operands.size(), DType::kF32);
    std::string mix;
    for (size_t m = 0; m < mixed.size(); ++m) {
      if (mask >> m & 1u) dtypes[mixed[m]] = DType::kBF16;
    }
    for (size_t i = 0; i < c.operands.size(); ++i) {
      mix += std::string(c.operands[i].name) + ":" + std::string(dtype_name(dtypes[i])) + " ";
    }
    SCOPED_TRACE(c.name + " " + mix);
    const std::vector<Storage> got = run_case(c, dtypes, 1);
    const std::vector<Storage> got_two_threads = run_case(c, dtypes, 2);

    Arrays rounded, unrounded;
    for (size_t i = 0; i < c.operands.size(); ++i) {
      rounded.push_back(Storage(dtypes[i], c.operands[i].values).values());
      unrounded.push_back(c.operands[i].values);
    }
    c.reference(rounded);
    c.reference(unrounded);
    for (size_t i = 0; i < c.operands.size(); ++i) {
      if (!c.operands[i].output) continue;
      SCOPED_TRACE(c.operands[i].name);
      const std::vector<double> values = got[i].values();
      const bool bf16_out = dtypes[i] == DType::kBF16;
      EXPECT_TRUE(
          within(values, rounded[i], c.row, bf16_out ? 0x1p-8 : 0.0, bf16_out ? 2e-5 : 1e-5));
      EXPECT_TRUE(within(values, unrounded[i], c.row, 0.0, 2e-2));
      EXPECT_TRUE(got[i].same_bits(got_two_threads[i])) << "1 vs 2 threads";
    }
  }
}

// Sizes large enough to split between two threads, with vector tails (1001, 35).
constexpr int64_t kN = 40, kD = 1001, kV = 37;

OpCase embedding_forward_case() {
  const std::vector<int32_t> tokens = uniform_ints(kN, "bf16/emb/tokens", kV);
  return {"embedding_forward",
          kD,
          {{"out", Shape{kN, kD}, true, true, normal_values(kN * kD, "bf16/emb/out", 0, 1)},
           {"table", Shape{kV, kD}, false, true, normal_values(kV * kD, "bf16/emb/table", 0, 1)}},
          [tokens](const std::vector<TensorView>& v) {
            cpu().embedding_forward(v[0], tokens.data(), v[1]);
          },
          [tokens](Arrays& a) {
            ref::embedding_forward(a[0].data(), tokens.data(), a[1].data(), kN, kD, kV);
          }};
}

OpCase embedding_backward_case() {
  const std::vector<int32_t> tokens = uniform_ints(kN, "bf16/emb/tokens", kV);
  return {"embedding_backward",
          kD,
          {{"d_table", Shape{kV, kD}, true, false, normal_values(kV * kD, "bf16/emb/dt", 0, 1)},
           {"d_out", Shape{kN, kD}, false, true, normal_values(kN * kD, "bf16/emb/dout", 0, 1)}},
          [tokens](const std::vector<TensorView>& v) {
            cpu().embedding_backward(v[0], v[1], tokens.data());
          },
          [tokens](Arrays& a) {
            ref::embedding_backward(a[0].data(), a[1].data(), tokens.data(), kN, kD, kV);
          }};
}

constexpr float kEps = 1e-5f;

OpCase rmsnorm_forward_case() {
  return {
      "rmsnorm_forward",
      kD,
      {{"out", Shape{kN, kD}, true, true, std::vector<double>(kN * kD)},
       {"rstd", Shape{kN}, true, false, std::vector<double>(kN)},
       {"in", Shape{kN, kD}, false, true, normal_values(kN * kD, "bf16/rms/in", 0.3f, 2)},
       {"weight", Shape{kD}, false, true, normal_values(kD, "bf16/rms/w", 1, 0.2f)}},
      [](const std::vector<TensorView>& v) { cpu().rmsnorm_forward(v[0], v[1], v[2], v[3], kEps); },
      [](Arrays& a) {
        ref::rmsnorm_forward(a[0].data(), a[1].data(), a[2].data(), a[3].data(), kN, kD,
                             double(kEps));
      }};
}

OpCase rmsnorm_backward_case() {
  return {"rmsnorm_backward",
          kD,
          {{"d_in", Shape{kN, kD}, true, true, std::vector<double>(kN * kD)},
           {"d_weight", Shape{kD}, true, false, normal_values(kD, "bf16/rms/dw", 0, 1)},
           {"d_out", Shape{kN, kD}, false, true, normal_values(kN * kD, "bf16/rms/dout", 0, 1)},
           {"in", Shape{kN, kD}, false, true, normal_values(kN * kD, "bf16/rms/in", 0.3f, 2)},
           {"weight", Shape{kD}, false, true, normal_values(kD, "bf16/rms/w", 1, 0.2f)},
           {"rstd", Shape{kN}, false, false, uniform_values(kN, "bf16/rms/rstd", 0.4f, 0.6f)}},
          [](const std::vector<TensorView>& v) {
            cpu().rmsnorm_backward(v[0], v[1], v[2], v[3], v[4], v[5]);
          },
          [](Arrays& a) {
            ref::rmsnorm_backward(a[0].data(), a[1].data(), a[2].data(), a[3].data(), a[4].data(),
                                  a[5].data(), kN, kD);
          }};
}

// RoPE: 256 tokens × 4 heads × head_dim 70 (half 35: a vector tail on every target).
constexpr int64_t kRopeN = 256, kRopeH = 4, kRopeDim = 70, kRopeHalf = kRopeDim / 2;

OpCase rope_case(bool forward) {
  const std::vector<int32_t> positions = uniform_ints(kRopeN, "bf16/rope/pos", 1u << 16);
  std::vector<float> cos(kRopeN * kRopeHalf), sin(kRopeN * kRopeHalf);
  RopeParams params;
  params.theta = 500000.0;
  cpu().rope_cos_sin(TensorView(cos.data(), DType::kF32, Shape{kRopeN, kRopeHalf}),
                     TensorView(sin.data(), DType::kF32, Shape{kRopeN, kRopeHalf}),
                     positions.data(), params);
  const Shape table{kRopeN, kRopeHalf}, rows{kRopeN, kRopeH, kRopeDim};
  const int64_t numel = kRopeN * kRopeH * kRopeDim;
  return {forward ? "rope_forward" : "rope_backward",
          kRopeDim,
          {{"out", rows, true, true, std::vector<double>(numel)},
           {"in", rows, false, true, normal_values(numel, "bf16/rope/in", 0, 1)},
           {"cos", table, false, false, std::vector<double>(cos.begin(), cos.end())},
           {"sin", table, false, false, std::vector<double>(sin.begin(), sin.end())}},
          [forward](const std::vector<TensorView>& v) {
            if (forward) {
              cpu().rope_forward(v[0], v[1], v[2], v[3]);
            } else {
              cpu().rope_backward(v[0], v[1], v[2], v[3]);
            }
          },
          [forward](Arrays& a) {
            if (forward) {
              ref::rope_forward(a[0].data(), a[1].data(), a[2].data(), a[3].data(), kRopeN, kRopeH,
                                kRopeDim);
            } else {
              ref::rope_backward(a[0].data(), a[1].data(), a[2].data(), a[3].data(), kRopeN, kRopeH,
                                 kRopeDim);
            }
          }};
}

OpCase swiglu_forward_case() {
  const Shape shape{kN, kD};
  return {"swiglu_forward",
          kD,
          {{"out", shape, true, true, std::vector<double>(kN * kD)},
           {"gate", shape, false, true, normal_values(kN * kD, "bf16/swiglu/gate", 0, 3)},
           {"up", shape, false, true, normal_values(kN * kD, "bf16/swiglu/up", 0, 1)}},
          [](const std::vector<TensorView>& v) { cpu().swiglu_forward(v[0], v[1], v[2]); },
          [](Arrays& a) { ref::swiglu_forward(a[0].data(), a[1].data(), a[2].data(), kN, kD); }};
}

OpCase swiglu_backward_case() {
  const Shape shape{kN, kD};
  return {
      "swiglu_backward",
      kD,
      {{"d_gate", shape, true, true, std::vector<double>(kN * kD)},
       {"d_up", shape, true, true, std::vector<double>(kN * kD)},
       {"d_out", shape, false, true, normal_values(kN * kD, "bf16/swiglu/dout", 0, 1)},
       {"gate", shape, false, true, normal_values(kN * kD, "bf16/swiglu/gate", 0, 3)},
       {"up", shape, false, true, normal_values(kN * kD, "bf16/swiglu/up", 0, 1)}},
      [](const std::vector<TensorView>& v) { cpu().swiglu_backward(v[0], v[1], v[2], v[3], v[4]); },
      [](Arrays& a) {
        ref::swiglu_backward(a[0].data(), a[1].data(), a[2].data(), a[3].data(), a[4].data(), kN,
                             kD);
      }};
}

// Cross-entropy over a vocabulary of 1001 with two masked rows.
std::vector<double> xent_weights() {
  std::vector<double> w = uniform_values(kN, "bf16/xent/w", 0.5f, 1.5f);
  w[3] = w[17] = 0.0;
  return w;
}

OpCase cross_entropy_forward_case() {
  const std::vector<int32_t> targets = uniform_ints(kN, "bf16/xent/targets", kD);
  return {"cross_entropy_forward",
          kN,  // loss and lse: one row over the batch
          {{"loss", Shape{kN}, true, false, std::vector<double>(kN)},
           {"lse", Shape{kN}, true, false, std::vector<double>(kN)},
           {"logits", Shape{kN, kD}, false, true, normal_values(kN * kD, "bf16/xent/x", 0, 1.5f)},
           {"weights", Shape{kN}, false, false, xent_weights()}},
          [targets](const std::vector<TensorView>& v) {
            cpu().cross_entropy_forward(v[0], v[1], v[2], targets.data(), v[3]);
          },
          [targets](Arrays& a) {
            ref::cross_entropy_forward(a[0].data(), a[1].data(), a[2].data(), targets.data(),
                                       a[3].data(), kN, kD);
          }};
}

OpCase cross_entropy_backward_case() {
  const std::vector<int32_t> targets = uniform_ints(kN, "bf16/xent/targets", kD);
  const std::vector<double> logits = normal_values(kN * kD, "bf16/xent/x", 0, 1.5f);
  const std::vector<double> weights = xent_weights();
  std::vector<double> loss(kN), lse(kN);
  ref::cross_entropy_forward(loss.data(), lse.data(), logits.data(), targets.data(), weights.data(),
                             kN, kD);
  for (double& l : lse) l = float(l);
  const float d_loss = 0.37f;
  return {"cross_entropy_backward",
          kD,
          {{"d_logits", Shape{kN, kD}, true, true, std::vector<double>(kN * kD)},
           {"logits", Shape{kN, kD}, false, true, logits},
           {"lse", Shape{kN}, false, false, lse},
           {"weights", Shape{kN}, false, false, weights}},
          [targets, d_loss](const std::vector<TensorView>& v) {
            cpu().cross_entropy_backward(v[0], v[1], v[2], targets.data(), v[3], d_loss);
          },
          [targets, d_loss](Arrays& a) {
            ref::cross_entropy_backward(a[0].data(), a[1].data(), a[2].data(), targets.data(),
                                        a[3].data(), double(d_loss), kN, kD);
          }};
}

constexpr int64_t kElements = 40011;  // two threads' worth, and a vector tail

OpCase add_case() {
  const Shape shape{kElements};
  return {"add",
          kElements,
          {{"out", shape, true, true, std::vector<double>(kElements)},
           {"a", shape, false, true, normal_values(kElements, "bf16/add/a", 0, 1)},
           {"b", shape, false, true, normal_values(kElements, "bf16/add/b", 0, 1e-2f)}},
          [](const std::vector<TensorView>& v) { cpu().add(v[0], v[1], v[2]); },
          [](Arrays& a) { ref::add(a[0].data(), a[1].data(), a[2].data(), kElements); }};
}

OpCase add_inplace_case() {
  const Shape shape{kElements};
  return {"add_inplace",
          kElements,
          {{"acc", shape, true, true, normal_values(kElements, "bf16/add/a", 0, 1)},
           {"x", shape, false, true, normal_values(kElements, "bf16/add/b", 0, 1)}},
          [](const std::vector<TensorView>& v) { cpu().add_inplace(v[0], v[1]); },
          [](Arrays& a) { ref::add_inplace(a[0].data(), a[1].data(), kElements); }};
}

OpCase scale_case() {
  const Shape shape{kElements};
  const float alpha = -0.731f;
  return {"scale",
          kElements,
          {{"out", shape, true, true, std::vector<double>(kElements)},
           {"in", shape, false, true, normal_values(kElements, "bf16/scale/in", 0, 1)}},
          [alpha](const std::vector<TensorView>& v) { cpu().scale(v[0], v[1], alpha); },
          [alpha](Arrays& a) { ref::scale(a[0].data(), a[1].data(), double(alpha), kElements); }};
}

AdamWStep adamw_step() {
  AdamWStep s;
  s.b1 = 0.9f;
  s.b2 = 0.95f;
  s.one_minus_b1 = float(1.0 - 0.9);
  s.one_minus_b2 = float(1.0 - 0.95);
  s.eps = 1e-8f;
  s.eps_root = 0.0f;
  s.weight_decay = 0.1f;
  s.learning_rate = 3e-3f;
  s.correction1 = float(1.0 - std::pow(0.9, 3));
  s.correction2 = float(1.0 - std::pow(0.95, 3));
  return s;
}

// train/optimizer.h's rule in double, the new moments feeding the update.
void adamw_reference(Arrays& a, const AdamWStep& s) {
  for (size_t i = 0; i < a[0].size(); ++i) {
    const double g = a[1][i];
    const double m = double(s.one_minus_b1) * g + double(s.b1) * a[2][i];
    const double v = double(s.one_minus_b2) * g * g + double(s.b2) * a[3][i];
    const double adam = (m / double(s.correction1)) /
                        (std::sqrt(v / double(s.correction2) + double(s.eps_root)) + double(s.eps));
    a[0][i] -= double(s.learning_rate) * (adam + double(s.weight_decay) * a[0][i]);
    a[2][i] = m;
    a[3][i] = v;
  }
}

OpCase adamw_case() {
  const Shape shape{kElements};
  const AdamWStep step = adamw_step();
  std::vector<double> nu = normal_values(kElements, "bf16/adamw/nu", 0, 1e-2f);
  for (double& v : nu) v = v * v;
  // Rows of 1001 for the metric: a bf16 moment next to its cancelling gradient moves by far more
  // than 2e-2 of itself, not of its neighbours.
  return {"adamw_update",
          kD,
          {{"params", shape, true, true, normal_values(kElements, "bf16/adamw/p", 0, 1)},
           {"grads", shape, false, true, normal_values(kElements, "bf16/adamw/g", 0, 1e-2f)},
           {"mu", shape, true, true, normal_values(kElements, "bf16/adamw/mu", 0, 1e-2f)},
           {"nu", shape, true, true, nu}},
          [step](const std::vector<TensorView>& v) {
            cpu().adamw_update(v[0], v[1], v[2], v[3], step);
          },
          [step](Arrays& a) { adamw_reference(a, step); }};
}

OpCase dequantize_case() {
  const int64_t rows = 64, cols = 515;
  std::vector<int8_t> codes(rows * cols);
  const std::vector<int32_t> ints = uniform_ints(rows * cols, "bf16/deq/codes", 255);
  for (size_t i = 0; i < codes.size(); ++i) codes[i] = int8_t(ints[i] - 127);
  return {"dequantize_rows_int8",
          cols,
          {{"x", Shape{rows, cols}, true, true, std::vector<double>(rows * cols)},
           {"scale", Shape{rows}, false, false, uniform_values(rows, "bf16/deq/scale", 0.01f, 1)}},
          [codes](const std::vector<TensorView>& v) {
            cpu().dequantize_rows_int8(
                v[0], TensorView(const_cast<int8_t*>(codes.data()), DType::kI8, v[0].shape()),
                v[1]);
          },
          [codes, cols](Arrays& a) {
            for (size_t i = 0; i < codes.size(); ++i) a[0][i] = codes[i] * a[1][i / size_t(cols)];
          }};
}

std::vector<OpCase> all_cases() {
  return {embedding_forward_case(),
          embedding_backward_case(),
          rmsnorm_forward_case(),
          rmsnorm_backward_case(),
          rope_case(true),
          rope_case(false),
          swiglu_forward_case(),
          swiglu_backward_case(),
          cross_entropy_forward_case(),
          cross_entropy_backward_case(),
          add_case(),
          add_inplace_case(),
          scale_case(),
          adamw_case(),
          dequantize_case()};
}

class Bf16RowOps : public ::testing::TestWithParam<int> {};

TEST_P(Bf16RowOps, EveryDtypeMixMatchesTheReference) { check_every_mix(all_cases()[GetParam()]); }

INSTANTIATE_TEST_SUITE_P(Ops, Bf16RowOps, ::testing::Range(0, int(all_cases().size())),
                         [](const ::testing::TestParamInfo<int>& param_info) {
                           return all_cases()[param_info.param].name;
                         });

// ---- the rounding itself ----

// Float bit patterns that probe the rounding: ties to even and odd, the largest finite values
// (which round to inf), denormals, zeros, infinities, quiet and signalling NaNs of both signs,
// then random patterns.
std::vector<uint32_t> probe_bits() {
  std::vector<uint32_t> bits = {0x00000000u, 0x80000000u, 0x3f808000u, 0x3f818000u, 0x3f80ffffu,
                                0x3f808001u, 0x7f7fffffu, 0xff7fffffu, 0x7f7f8000u, 0x7f7f7fffu,
                                0x00000001u, 0x00008000u, 0x00018000u, 0x807fffffu, 0x7f800000u,
                                0xff800000u, 0x7fc00000u, 0xffc00001u, 0x7f800001u, 0xff800100u,
                                0x7fbfffffu, 0x7f80ffffu};
  const std::vector<int32_t> random = uniform_ints(1 << 16, "bf16/probe", 1u << 31);
  for (size_t i = 0; i < random.size(); ++i) {
    bits.push_back(uint32_t(random[i]) * 2u + uint32_t(i & 1u));
  }
  return bits;
}

TEST(Bf16Rounding, SimdConversionIsFloatToBf16BitForBit) {
  const std::vector<uint32_t> bits = probe_bits();
  std::vector<float> values(bits.size());
  std::memcpy(values.data(), bits.data(), bits.size() * sizeof(float));
  std::vector<bf16> converted(values.size()), scaled(values.size());
  cpu::convert(converted.data(), values.data(), int64_t(values.size()));
  // scale by 1 through the table: the same rounding in another op (and its one-lane tail).
  const Shape shape{int64_t(values.size())};
  cpu().scale(TensorView(scaled.data(), DType::kBF16, shape),
              TensorView(values.data(), DType::kF32, shape), 1.0f);
  for (size_t i = 0; i < values.size(); ++i) {
    const uint16_t want = float_to_bf16(values[i]).bits;
    ASSERT_EQ(converted[i].bits, want) << std::hex << "input 0x" << bits[i];
    if (!std::isnan(values[i])) {
      ASSERT_EQ(scaled[i].bits, want) << std::hex << "input 0x" << bits[i];
    } else {
      ASSERT_TRUE(std::isnan(bf16_to_float(scaled[i]))) << std::hex << "input 0x" << bits[i];
    }
  }
  // Widening back is exact.
  std::vector<float> widened(values.size());
  cpu::convert(widened.data(), converted.data(), int64_t(values.size()));
  for (size_t i = 0; i < values.size(); ++i) {
    ASSERT_EQ(std::bit_cast<uint32_t>(widened[i]), uint32_t(converted[i].bits) << 16);
  }
}

// ---- in place, shards, sums, int8 ----

TEST(Bf16InPlace, RopeSwigluAndCrossEntropyInPlaceEqualOutOfPlace) {
  const Shape rows{kRopeN, kRopeH, kRopeDim};
  const OpCase rope = rope_case(true);
  Storage x(DType::kBF16, rope.operands[1].values),
      y(DType::kBF16, std::vector<double>(rows.numel()));
  Storage cos(DType::kF32, rope.operands[2].values), sin(DType::kF32, rope.operands[3].values);
  const Shape table{kRopeN, kRopeHalf};
  cpu().rope_forward(y.view(rows), x.view(rows), cos.view(table), sin.view(table));
  cpu().rope_forward(x.view(rows), x.view(rows), cos.view(table), sin.view(table));
  EXPECT_TRUE(x.same_bits(y));

  const OpCase swiglu = swiglu_backward_case();
  const Shape shape{kN, kD};
  const std::vector<double> zeros(kN * kD);
  Storage d_out(DType::kBF16, swiglu.operands[2].values);
  Storage gate(DType::kBF16, swiglu.operands[3].values),
      up(DType::kBF16, swiglu.operands[4].values);
  Storage d_gate(DType::kBF16, zeros), d_up(DType::kBF16, zeros);
  cpu().swiglu_backward(d_gate.view(shape), d_up.view(shape), d_out.view(shape), gate.view(shape),
                        up.view(shape));
  cpu().swiglu_backward(gate.view(shape), up.view(shape), d_out.view(shape), gate.view(shape),
                        up.view(shape));
  EXPECT_TRUE(gate.same_bits(d_gate));
  EXPECT_TRUE(up.same_bits(d_up));

  const OpCase xent = cross_entropy_backward_case();
  const std::vector<int32_t> targets = uniform_ints(kN, "bf16/xent/targets", kD);
  for (const DType dtype : {DType::kBF16, DType::kF32}) {
    Storage logits(dtype, xent.operands[1].values), d_logits(dtype, zeros);
    Storage lse(DType::kF32, xent.operands[2].values), w(DType::kF32, xent.operands[3].values);
    cpu().cross_entropy_backward(d_logits.view(shape), logits.view(shape), lse.view(Shape{kN}),
                                 targets.data(), w.view(Shape{kN}), 0.37f);
    cpu().cross_entropy_backward(logits.view(shape), logits.view(shape), lse.view(Shape{kN}),
                                 targets.data(), w.view(Shape{kN}), 0.37f);
    EXPECT_TRUE(logits.same_bits(d_logits)) << dtype_name(dtype);
  }
}

TEST(Bf16Adamw, AShardUpdatesBitForBitLikeTheWhole) {
  const OpCase c = adamw_case();
  const std::vector<DType> dtypes = {DType::kBF16, DType::kF32, DType::kBF16, DType::kBF16};
  const std::vector<Storage> whole = run_case(c, dtypes, 1);
  std::vector<Storage> sharded;
  for (size_t i = 0; i < 4; ++i) sharded.emplace_back(dtypes[i], c.operands[i].values);
  const int64_t cut = 12345;  // not a multiple of any vector width
  for (const auto& [begin, end] : {std::pair<int64_t, int64_t>{0, cut}, {cut, kElements}}) {
    std::vector<TensorView> views;
    for (Storage& s : sharded) {
      const TensorView all = s.view(Shape{kElements});
      const size_t size = dtype_size(all.dtype());
      views.emplace_back(static_cast<char*>(all.raw()) + begin * int64_t(size), all.dtype(),
                         Shape{end - begin});
    }
    cpu().adamw_update(views[0], views[1], views[2], views[3], adamw_step());
  }
  for (size_t i = 0; i < 4; ++i) EXPECT_TRUE(whole[i].same_bits(sharded[i])) << i;
}

TEST(Bf16SumOfSquares, MatchesTheReferenceAndTheThreadCount) {
  const std::vector<double> x = normal_values(kElements * 3, "bf16/sumsq", 0.1f, 2);
  Storage s(DType::kBF16, x);
  const TensorView view = s.view(Shape{kElements * 3});
  const std::vector<double> rounded = s.values();
  const double want = ref::sum_of_squares(rounded.data(), int64_t(rounded.size()));
  // The op's order is element order: the reference's sum, bit for bit, at any thread count.
  double one, two;
  {
    ThreadCount threads(1);
    cpu().sum_of_squares(&one, view);
  }
  {
    ThreadCount threads(2);
    cpu().sum_of_squares(&two, view);
  }
  EXPECT_EQ(one, want);
  EXPECT_EQ(one, two);
}

TEST(Bf16Int8, QuantizingABf16RowQuantizesItsWideningExactly) {
  const int64_t rows = 64, cols = 515;
  const float levels = 127.5f;
  Storage x(DType::kBF16, normal_values(rows * cols, "bf16/quant/x", 0, 2));
  const std::vector<double> widened = x.values();
  const std::vector<float> widened_f32(widened.begin(), widened.end());
  std::vector<int8_t> codes(rows * cols), want_codes(rows * cols);
  std::vector<float> scale(rows), want_scale(rows);
  cpu().quantize_rows_int8(TensorView(codes.data(), DType::kI8, Shape{rows, cols}),
                           TensorView(scale.data(), DType::kF32, Shape{rows}),
                           x.view(Shape{rows, cols}), levels);
  ref::quantize_rows_int8(want_codes.data(), want_scale.data(), widened_f32.data(), rows, cols,
                          levels);
  EXPECT_EQ(codes, want_codes);
  EXPECT_EQ(scale, want_scale);
}

// ---- what the table refuses ----

// The message of the check a call fails, or "" if it passes.
template <typename Call>
std::string failed_check(const Call& call) {
  set_check_handler([](const std::string& message) { throw Error(message); });
  std::string message;
  try {
    call();
  } catch (const Error& e) {
    message = e.what();
  }
  set_check_handler({});
  return message;
}

TEST(Bf16Errors, UnsupportedDtypesAreClearErrors) {
  const int64_t N = 4, D = 8;
  std::vector<float> f32(N * D);
  std::vector<bf16> b16(N * D);
  std::vector<int8_t> i8(N * D);
  const TensorView in_f32(f32.data(), DType::kF32, Shape{N, D});
  const TensorView in_bf16(b16.data(), DType::kBF16, Shape{N, D});
  const TensorView in_i8(i8.data(), DType::kI8, Shape{N, D});
  const TensorView weight(f32.data(), DType::kF32, Shape{D});
  const TensorView rstd_f32(f32.data(), DType::kF32, Shape{N});
  const TensorView rstd_bf16(b16.data(), DType::kBF16, Shape{N});

  std::string message =
      failed_check([&] { cpu().rmsnorm_forward(in_f32, rstd_f32, in_i8, weight, kEps); });
  EXPECT_NE(message.find("rmsnorm_forward takes f32 or bf16"), std::string::npos) << message;
  EXPECT_NE(message.find("int8"), std::string::npos) << message;

  message = failed_check([&] { cpu().rmsnorm_forward(in_bf16, rstd_bf16, in_f32, weight, kEps); });
  EXPECT_NE(message.find("rmsnorm_forward takes rstd as f32, got a bf16"), std::string::npos)
      << message;

  message = failed_check([&] {
    cpu().rmsnorm_backward(in_f32, TensorView(b16.data(), DType::kBF16, Shape{D}), in_f32, in_f32,
                           weight, rstd_f32);
  });
  EXPECT_NE(message.find("d_weight as f32"), std::string::npos) << message;

  const std::vector<int32_t> tokens(N, 1);
  message = failed_check([&] { cpu().embedding_backward(in_bf16, in_f32, tokens.data()); });
  EXPECT_NE(message.find("d_table as f32"), std::string::npos) << message;

  message = failed_check([&] { cpu().add(in_i8, in_f32, in_f32); });
  EXPECT_NE(message.find("add takes f32 or bf16"), std::string::npos) << message;

  // In place over one buffer read as two dtypes is a bug in the caller.
  const TensorView same_buffer_as_bf16(f32.data(), DType::kBF16, Shape{N, D});
  message = failed_check([&] { cpu().scale(same_buffer_as_bf16, in_f32, 2.0f); });
  EXPECT_NE(message.find("in place needs one dtype"), std::string::npos) << message;

  // fill_zero takes every dtype.
  i8.assign(i8.size(), 3);
  EXPECT_EQ(failed_check([&] { cpu().fill_zero(in_i8); }), "");
  EXPECT_EQ(i8, std::vector<int8_t>(N * D, 0));
}

}  // namespace
}  // namespace maxctx::kernels

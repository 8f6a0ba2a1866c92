// The backend conformance suite (ggml's test-backend-ops): one table of op cases, small random
// shapes with odd sizes and every f32/bf16 mix an op takes, run on every backend present and
// compared with the cpu backend on the same inputs. A row is (case, backend):
//   traced-cpu    the op list's generated traced wrapper over the cpu backend: bit for bit;
//   emulated-gpu  the emulated GPU (kernels/emulated/, generated from the op list): bit for bit;
//   cuda          where this process sees a GPU (skipped otherwise): the tolerances below.
// The cpu backend is the oracle here; its own accuracy against kernels/ref is kernels_test's,
// bf16_row_ops_test's and bf16_matmul_test's. After the table, properties every backend holds
// (the rounded-delta rule of the bf16 attention backward, the refusal of misaligned device views,
// the id checks, deterministic embedding backward, the time verbs' order and events).
//
// Tolerances for the cuda backend, |gpu − cpu| per row of the op (test_util.h's metrics); zero
// means bit for bit:
//   fp32 elementwise and row ops: 1e-5 (1e-6 where the op is one or two roundings) of the row's
//     max; rope's cos/sin 1e-7 (double angles, rounded once: a rare tie differs by an ulp);
//   fp32 reductions over many rows (rmsnorm d_weight) and attention backward: 1e-4;
//   fp32 GEMM: ‖Δ‖ ≤ 1e-5·‖cpu‖ per row (kRowNorm): the same products, another summation order;
//   bf16 outputs: 2^-7 of the row's max (each side rounds once, half an ulp each);
//   bf16 attention: 2e-2 of the row's max (P is rounded to bf16 after normalizing by the row's
//     global max on the GPU, by a running max on the cpu: the rounded P differ by up to 2^-8);
//   int8 ops, conversions, copies, embedding forward: bit for bit.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <deque>
#include <functional>
#include <limits>
#include <ostream>
#include <string>
#include <vector>

#include "kernels/attention_layouts.h"
#include "kernels/test_util.h"
#include "maxctx/core/check.h"
#include "maxctx/core/dtype.h"
#include "maxctx/core/tensor.h"
#include "maxctx/kernels/emulated/emulated_gpu.h"
#include "maxctx/kernels/host_transfer.h"
#include "maxctx/kernels/kernels.h"
#include "maxctx/kernels/traced_kernels.h"
#if MAXCTX_HAVE_CUDA
#include "maxctx/kernels/cuda/devices.h"
#endif

namespace maxctx::kernels {
namespace {

using testing_util::attention_layouts;
using testing_util::AttentionLayout;
using testing_util::iota;
using testing_util::Metric;
using testing_util::ones;
using testing_util::params;
using testing_util::repeat;
using testing_util::widen;

constexpr double kBitForBit = 0.0;
constexpr double kBf16RowTol = 1.0 / 128;  // 2^-7
const DType kFloats[] = {DType::kF32, DType::kBF16};

const Kernels& cpu() { return backend(Device::kCpu); }

// ---- the backends under test ----

struct BackendUnderTest {
  const char* name;
  // The backend, or null with the reason it is absent from this process.
  const Kernels* (*find)(std::string& why_absent);
  bool runs_cpu_code;  // computes with the cpu backend's kernels: every output bit for bit
};

const Kernels* find_traced_cpu(std::string&) { return &traced(cpu()); }
const Kernels* find_emulated(std::string&) { return &emulated::emulated_gpu_kernels(); }
const Kernels* find_cuda(std::string& why_absent) {
#if MAXCTX_HAVE_CUDA
  const cuda::CudaDevices devices = cuda::visible_cuda_devices();
  if (devices.count() > 0) return &backend(Device::kCuda);
  why_absent = "no GPU: " + devices.error;
#else
  why_absent = "this build has no cuda backend";
#endif
  return nullptr;
}

const BackendUnderTest kBackends[] = {
    {"traced_cpu", &find_traced_cpu, true},
    {"emulated_gpu", &find_emulated, true},
    {"cuda", &find_cuda, false},
};

// ---- one backend's side of a case: operands built from host values, outputs read back ----

struct Output {
  std::string name;
  std::vector<double> values;
  int64_t row;
  Metric metric;
  double tolerance;  // kBitForBit: every backend's bits equal the cpu's
};

class Side {
 public:
  explicit Side(const Kernels& kernels) : k(kernels) {}
  const Kernels& k;

  // A tensor of `dtype` holding `values` rounded to it once on the host (every backend gets the
  // same bits), in k's memory.
  TensorView values(const std::vector<double>& values, Shape shape, DType dtype) {
    Tensor f32 = cpu().empty(shape, DType::kF32);
    for (size_t i = 0; i < values.size(); ++i) f32.data<float>()[i] = static_cast<float>(values[i]);
    Tensor host = cpu().empty(shape, dtype);
    cpu().copy(host.view(), f32.view());
    return upload(host.view());
  }
  TensorView random(const std::string& stream, Shape shape, DType dtype, float stddev = 1.0f) {
    return values(
        testing_util::normal_values(static_cast<size_t>(shape.numel()), stream, 0.0f, stddev),
        shape, dtype);
  }
  TensorView zeros(Shape shape, DType dtype) {
    return tensors_.emplace_back(k.empty(shape, dtype)).view();
  }
  // A host tensor's bytes in k's memory.
  TensorView upload(TensorView host) { return tensors_.emplace_back(to_backend(k, host)).view(); }
  const int32_t* ids(const std::vector<int32_t>& host) {
    return ids_.emplace_back(k, std::span<const int32_t>(host)).data();
  }

  // Records `view`'s values now (a case may go on to overwrite it).
  void expect(const std::string& name, TensorView view, int64_t row, Metric metric,
              double tolerance) {
    const Tensor host = to_host(k, view);
    outputs.push_back({name, widen(host.view()), row, metric, tolerance});
  }
  void expect_values(const std::string& name, std::vector<double> values, int64_t row,
                     double tolerance) {
    outputs.push_back({name, std::move(values), row, Metric::kRowRelative, tolerance});
  }

  std::vector<Output> outputs;

 private:
  std::deque<Tensor> tensors_;
  std::deque<DeviceIndices> ids_;
};

// Equal ±inf positions (an lse row with no visible key), then the rest by the metric.
::testing::AssertionResult within_tolerance(const Output& got, const Output& want) {
  std::vector<double> g = got.values, w = want.values;
  for (size_t i = 0; i < g.size(); ++i) {
    if (!std::isinf(g[i]) && !std::isinf(w[i])) continue;
    if (g[i] != w[i]) {
      return ::testing::AssertionFailure() << "element " << i << ": " << g[i] << " vs " << w[i];
    }
    g[i] = w[i] = 0;
  }
  return testing_util::close(g, w, want.row, want.metric, want.tolerance);
}

void expect_conforms(const Output& got, const Output& want, bool bit_for_bit) {
  ASSERT_EQ(got.values.size(), want.values.size()) << want.name;
  if (bit_for_bit || want.tolerance == kBitForBit) {
    for (size_t i = 0; i < got.values.size(); ++i) {
      ASSERT_EQ(std::memcmp(&got.values[i], &want.values[i], sizeof(double)), 0)
          << want.name << " element " << i << ": " << got.values[i] << ", cpu " << want.values[i];
    }
    return;
  }
  EXPECT_TRUE(within_tolerance(got, want)) << want.name;
}

// ---- the table ----

struct OpCase {
  std::string name;
  std::function<void(Side&)> run;
};

// gtest names the rows by the generators below; these print a failing row's parameters.
void PrintTo(const OpCase* c, std::ostream* os) { *os << c->name; }
void PrintTo(const BackendUnderTest* b, std::ostream* os) { *os << b->name; }

std::string dtypes(DType a, DType b) {
  return std::string(dtype_name(a)) + "_" + std::string(dtype_name(b));
}
double tol_for(DType out, double f32_tol) { return out == DType::kBF16 ? kBf16RowTol : f32_tol; }

void add_elementwise_cases(std::vector<OpCase>& cases) {
  for (int64_t n : {1, 37, 4099}) {
    for (DType out_t : kFloats) {
      for (DType in_t : kFloats) {
        const double tol = tol_for(out_t, 1e-6);
        cases.push_back(
            {"elementwise_" + dtypes(out_t, in_t) + "_n" + std::to_string(n), [=](Side& s) {
               const TensorView a = s.random("a", Shape{n}, in_t);
               const TensorView b = s.random("b", Shape{n}, DType::kF32);
               const TensorView out = s.zeros(Shape{n}, out_t);
               s.k.add(out, a, b);
               s.expect("add", out, n, Metric::kRowRelative, tol);
               s.k.add_inplace(out, a);
               s.expect("add_inplace", out, n, Metric::kRowRelative, tol);
               s.k.scale(out, a, 0.37f);
               s.expect("scale", out, n, Metric::kRowRelative, tol);
               s.k.copy(out, a);  // rounds once to nearest even
               s.expect("copy", out, n, Metric::kRowRelative, kBitForBit);
               s.k.fill_zero(out);
               s.expect("fill_zero", out, n, Metric::kRowRelative, kBitForBit);
             }});
      }
    }
  }
  // Halfway cases, the largest finite values, infinities, NaNs and subnormals to bf16.
  cases.push_back({"copy_bf16_rounding_specials", [](Side& s) {
                     const std::vector<uint32_t> bits = {
                         0x3f808000u, 0x3f818000u, 0x7f7fffffu, 0xff7fffffu, 0x7f800000u,
                         0xff800000u, 0x7fc00001u, 0xffa00000u, 0x00000001u, 0x80008000u};
                     const auto n = static_cast<int64_t>(bits.size());
                     Tensor host = cpu().empty(Shape{n});
                     std::memcpy(host.view().raw(), bits.data(), bits.size() * sizeof(uint32_t));
                     const TensorView src = s.upload(host.view());
                     const TensorView dst = s.zeros(Shape{n}, DType::kBF16);
                     s.k.copy(dst, src);
                     const Tensor back = to_host(s.k, dst);
                     std::vector<double> dst_bits;
                     for (int64_t i = 0; i < n; ++i) dst_bits.push_back(back.data<bf16>()[i].bits);
                     s.expect_values("bf16 bits", dst_bits, n, kBitForBit);
                   }});
  for (DType param_t : kFloats) {
    cases.push_back({"adamw_" + std::string(dtype_name(param_t)), [=](Side& s) {
                       const AdamWStep step{0.9f, 0.999f, 0.1f,  0.001f, 1e-8f,
                                            0.0f, 0.1f,   3e-4f, 0.271f, 0.00299f};
                       const int64_t n = 1031;
                       const TensorView p = s.random("p", Shape{n}, param_t);
                       const TensorView g = s.random("g", Shape{n}, DType::kF32);
                       const TensorView mu = s.random("mu", Shape{n}, DType::kF32, 0.1f);
                       const TensorView nu =
                           s.values(testing_util::uniform_values(n, "nu", 0.0f, 0.01f), Shape{n},
                                    DType::kF32);
                       for (int it = 0; it < 3; ++it) s.k.adamw_update(p, g, mu, nu, step);
                       // Separate roundings in the cpu's order; 1e-6 leaves room for sqrt and /.
                       s.expect("params", p, n, Metric::kRowRelative, tol_for(param_t, 1e-6));
                       s.expect("mu", mu, n, Metric::kRowRelative, 1e-6);
                       s.expect("nu", nu, n, Metric::kRowRelative, 1e-6);
                     }});
  }
}

void add_row_op_cases(std::vector<OpCase>& cases) {
  for (auto [N, D] : {std::pair<int64_t, int64_t>{1, 7}, {13, 96}, {5, 1031}}) {
    for (DType t : kFloats) {
      cases.push_back({"rmsnorm_" + std::string(dtype_name(t)) + "_" + std::to_string(N) + "x" +
                           std::to_string(D),
                       [=](Side& s) {
                         const TensorView in = s.random("in", Shape{N, D}, t);
                         const TensorView w = s.random("w", Shape{D}, t);
                         const TensorView out = s.zeros(Shape{N, D}, t);
                         const TensorView rstd = s.zeros(Shape{N}, DType::kF32);
                         s.k.rmsnorm_forward(out, rstd, in, w, 1e-5f);
                         s.expect("out", out, D, Metric::kRowRelative, tol_for(t, 1e-5));
                         s.expect("rstd", rstd, 1, Metric::kRowRelative, 1e-5);
                         const TensorView g = s.random("g", Shape{N, D}, t);
                         const TensorView d_in = s.zeros(Shape{N, D}, t);
                         const TensorView d_w = s.random("dw", Shape{D}, DType::kF32);  // +=
                         s.k.rmsnorm_backward(d_in, d_w, g, in, w, rstd);
                         s.expect("d_in", d_in, D, Metric::kRowRelative, tol_for(t, 1e-5));
                         s.expect("d_weight", d_w, D, Metric::kRowRelative, 1e-4);
                       }});
    }
  }
  cases.push_back(
      {"rope_llama3", [](Side& s) {
         RopeParams params;
         params.theta = 500000.0;
         params.scaling = RopeScaling::kLlama3;
         const int64_t N = 11, H = 3, D = 64;
         std::vector<int32_t> positions(N);
         for (int64_t n = 0; n < N; ++n) positions[n] = static_cast<int32_t>(n * 9973 + 17);
         const TensorView cos = s.zeros(Shape{N, D / 2}, DType::kF32);
         const TensorView sin = s.zeros(Shape{N, D / 2}, DType::kF32);
         s.k.rope_cos_sin(cos, sin, s.ids(positions), params);
         s.expect("cos", cos, D / 2, Metric::kRowRelative, 1e-7);
         s.expect("sin", sin, D / 2, Metric::kRowRelative, 1e-7);
         // The cpu's tables from here on, so that rope itself is compared.
         Tensor cos_host = cpu().empty(Shape{N, D / 2}), sin_host = cpu().empty(Shape{N, D / 2});
         cpu().rope_cos_sin(cos_host.view(), sin_host.view(), positions.data(), params);
         const TensorView c = s.upload(cos_host.view()), sn = s.upload(sin_host.view());
         for (DType t : kFloats) {
           const std::string dt(dtype_name(t));
           const TensorView x = s.random("x", Shape{N, H, D}, t);
           const TensorView out = s.zeros(Shape{N, H, D}, t);
           s.k.rope_forward(out, x, c, sn);
           s.expect("forward " + dt, out, D, Metric::kRowRelative, tol_for(t, 1e-6));
           s.k.rope_backward(x, x, c, sn);  // in place
           s.expect("backward " + dt, x, D, Metric::kRowRelative, tol_for(t, 1e-6));
         }
       }});
  for (DType t : kFloats) {
    cases.push_back({"swiglu_" + std::string(dtype_name(t)), [=](Side& s) {
                       const int64_t N = 7, F = 333;
                       const TensorView gate = s.random("gate", Shape{N, F}, t, 3.0f);
                       const TensorView up = s.random("up", Shape{N, F}, t);
                       const TensorView out = s.zeros(Shape{N, F}, t);
                       s.k.swiglu_forward(out, gate, up);
                       s.expect("out", out, F, Metric::kRowRelative, tol_for(t, 1e-5));
                       const TensorView g = s.random("g", Shape{N, F}, t);
                       const TensorView d_gate = s.zeros(Shape{N, F}, t);
                       const TensorView d_up = s.zeros(Shape{N, F}, t);
                       s.k.swiglu_backward(d_gate, d_up, g, gate, up);
                       s.expect("d_gate", d_gate, F, Metric::kRowRelative, tol_for(t, 1e-5));
                       s.expect("d_up", d_up, F, Metric::kRowRelative, tol_for(t, 1e-5));
                     }});
    cases.push_back({"cross_entropy_" + std::string(dtype_name(t)), [=](Side& s) {
                       const int64_t N = 9, V = 1001;
                       std::vector<int32_t> targets = testing_util::uniform_ints(N, "targets", V);
                       targets[3] = -5;  // a masked row's target is never read
                       std::vector<double> w(N, 1.0);
                       w[3] = 0.0;
                       w[5] = 0.5;
                       const int32_t* target_ids = s.ids(targets);
                       const TensorView weights = s.values(w, Shape{N}, DType::kF32);
                       const TensorView logits = s.random("logits", Shape{N, V}, t, 4.0f);
                       const TensorView loss = s.zeros(Shape{N}, DType::kF32);
                       const TensorView lse = s.zeros(Shape{N}, DType::kF32);
                       s.k.cross_entropy_forward(loss, lse, logits, target_ids, weights);
                       s.expect("loss", loss, 1, Metric::kRowRelative, 1e-5);
                       s.expect("lse", lse, 1, Metric::kRowRelative, 1e-5);
                       s.k.cross_entropy_backward(logits, logits, lse, target_ids, weights,
                                                  0.125f);  // in place
                       s.expect("d_logits", logits, V, Metric::kRowRelative, tol_for(t, 1e-5));
                     }});
    cases.push_back({"embedding_" + std::string(dtype_name(t)), [=](Side& s) {
                       const int64_t V = 50, E = 33, N = 301;
                       const int32_t* tokens = s.ids(testing_util::uniform_ints(N, "tokens", 12));
                       const TensorView table = s.random("table", Shape{V, E}, t);
                       const TensorView out = s.zeros(Shape{N, E}, t);
                       s.k.embedding_forward(out, tokens, table);
                       s.expect("out", out, E, Metric::kRowRelative, kBitForBit);
                       const TensorView g = s.random("g", Shape{N, E}, t);
                       const TensorView d_table = s.random("dt", Shape{V, E}, DType::kF32);
                       s.k.embedding_backward(d_table, g, tokens);  // many repeated ids
                       s.expect("d_table", d_table, E, Metric::kRowRelative, 1e-5);
                     }});
  }
}

struct GemmShape {
  int64_t N, in, out;
};

void add_matmul_cases(std::vector<OpCase>& cases) {
  for (const GemmShape& g : {GemmShape{1, 17, 5}, {7, 33, 65}, {64, 128, 96}, {130, 257, 31}}) {
    for (DType in_t : kFloats) {
      for (DType w_t : kFloats) {
        for (DType out_t : kFloats) {
          const std::string name = "matmul_in_" + dtypes(in_t, w_t) + "_out_" +
                                   std::string(dtype_name(out_t)) + "_" + std::to_string(g.N) +
                                   "x" + std::to_string(g.in) + "x" + std::to_string(g.out);
          cases.push_back({name, [=](Side& s) {
                             const double tol = out_t == DType::kBF16 ? kBf16RowTol : 1e-5;
                             const Metric metric =
                                 out_t == DType::kBF16 ? Metric::kRowRelative : Metric::kRowNorm;
                             const TensorView in = s.random("in", Shape{g.N, g.in}, in_t);
                             const TensorView w = s.random("w", Shape{g.out, g.in}, w_t);
                             const TensorView out = s.zeros(Shape{g.N, g.out}, out_t);
                             s.k.matmul_forward(out, in, w);
                             s.expect("out", out, g.out, metric, tol);
                             // d_weight accumulates; d_in overwritten, then accumulated.
                             const TensorView d_out = s.random("g", Shape{g.N, g.out}, out_t);
                             const TensorView d_w = s.random("dw", Shape{g.out, g.in}, DType::kF32);
                             const TensorView d_in = s.random("din", Shape{g.N, g.in}, out_t);
                             s.k.matmul_backward(d_in, d_w, d_out, in, w);
                             s.expect("d_in", d_in, g.in, metric, tol);
                             s.expect("d_weight", d_w, g.in, Metric::kRowNorm, 1e-5);
                             s.k.matmul_backward_accumulate_input(d_in, d_w, d_out, in, w);
                             s.expect("d_in +=", d_in, g.in, metric, tol);
                             s.expect("d_weight twice", d_w, g.in, Metric::kRowNorm, 1e-5);
                             s.k.matmul_backward(TensorView(), d_w, d_out, in, w);  // no d_in
                             s.expect("d_weight only", d_w, g.in, Metric::kRowNorm, 1e-5);
                           }});
        }
      }
    }
  }
}

void add_int8_cases(std::vector<OpCase>& cases) {
  for (auto [N, in_dim, out_dim] : {std::tuple<int64_t, int64_t, int64_t>{1, 5, 3}, {9, 130, 37}}) {
    for (DType t : kFloats) {
      const std::string name = "int8_" + std::string(dtype_name(t)) + "_" + std::to_string(N) +
                               "x" + std::to_string(in_dim) + "x" + std::to_string(out_dim);
      cases.push_back(
          {name, [=](Side& s) {
             const TensorView w = s.random("w", Shape{out_dim, in_dim}, t);
             const TensorView x = s.random("x", Shape{N, in_dim}, t);
             const Int8Weights packed = s.k.int8_pack_weights(w);
             s.expect_values("scale", std::vector<double>(packed.scale.begin(), packed.scale.end()),
                             out_dim, kBitForBit);
             s.expect_values("row_sum",
                             std::vector<double>(packed.row_sum.begin(), packed.row_sum.end()),
                             out_dim, kBitForBit);
             Int8Rows rows;
             s.k.int8_quantize_rows(rows, x);
             const TensorView out = s.zeros(Shape{N, out_dim}, t);
             s.k.int8_matmul_forward(out, rows, packed);
             s.expect("matmul", out, out_dim, Metric::kRowRelative, kBitForBit);
             const TensorView codes = s.zeros(Shape{out_dim, in_dim}, DType::kI8);
             const TensorView scale = s.zeros(Shape{out_dim}, DType::kF32);
             s.k.quantize_rows_int8(codes, scale, w, kInt8Levels);
             s.expect("codes", codes, in_dim, Metric::kRowRelative, kBitForBit);
             s.expect("code scale", scale, 1, Metric::kRowRelative, kBitForBit);
             // Packing codes already quantized gives the same weight.
             const Int8Weights from_codes = s.k.int8_pack_codes(codes, scale);
             s.k.int8_matmul_forward(out, rows, from_codes);
             s.expect("matmul from codes", out, out_dim, Metric::kRowRelative, kBitForBit);
             // The KV cache's levels, and back.
             s.k.quantize_rows_int8(codes, scale, w, kInt8KvLevels);
             s.expect("kv codes", codes, in_dim, Metric::kRowRelative, kBitForBit);
             const TensorView back = s.zeros(Shape{out_dim, in_dim}, t);
             s.k.dequantize_rows_int8(back, codes, scale);
             s.expect("dequantized", back, in_dim, Metric::kRowRelative, kBitForBit);
           }});
    }
  }
}

// ---- attention ----

struct AttentionShapes {
  Shape q, kv, lse;
  explicit AttentionShapes(const AttentionParams& p)
      : q{p.batch, p.seq_q, p.heads_q, p.head_dim},
        kv{p.batch, p.seq_k, p.heads_kv, p.head_dim},
        lse{p.batch, p.heads_q, p.seq_q} {}
};

// Forward, then backward from the cpu's out and lse (both sides the same saved statistics),
// accumulating onto nonzero gradients.
void run_attention(Side& s, const AttentionLayout& l, DType in_t, DType out_t) {
  const AttentionParams& p = l.p;
  const AttentionShapes shape(p);
  const bool bf16 = in_t == DType::kBF16;
  const double out_tol = bf16 ? 2e-2 : 1e-5, grad_tol = bf16 ? 2e-2 : 1e-4;
  const TensorView q = s.random("q", shape.q, in_t), k = s.random("k", shape.kv, in_t);
  const TensorView v = s.random("v", shape.kv, in_t);
  const int32_t *q_pos = s.ids(l.q_pos), *q_seg = s.ids(l.q_seg);
  const int32_t *k_pos = s.ids(l.k_pos), *k_seg = s.ids(l.k_seg);
  const TensorView out = s.zeros(shape.q, out_t), lse = s.zeros(shape.lse, DType::kF32);
  s.k.attention_forward(out, lse, q, k, v, q_pos, q_seg, k_pos, k_seg, p, nullptr);
  s.expect("out", out, p.head_dim, Metric::kRowRelative, out_tol);
  s.expect("lse", lse, 1, Metric::kRowRelative, 1e-5);

  Side host(cpu());
  const TensorView hq = host.random("q", shape.q, in_t), hk = host.random("k", shape.kv, in_t);
  const TensorView hv = host.random("v", shape.kv, in_t);
  const TensorView cpu_out = host.zeros(shape.q, out_t);
  const TensorView cpu_lse = host.zeros(shape.lse, DType::kF32);
  cpu().attention_forward(cpu_out, cpu_lse, hq, hk, hv, l.q_pos.data(), l.q_seg.data(),
                          l.k_pos.data(), l.k_seg.data(), p, nullptr);
  const TensorView saved_out = s.upload(cpu_out), saved_lse = s.upload(cpu_lse);
  const TensorView d_out = s.random("d_out", shape.q, out_t);
  const TensorView dq = s.random("dq", shape.q, DType::kF32);
  const TensorView dk = s.random("dk", shape.kv, DType::kF32);
  const TensorView dv = s.random("dv", shape.kv, DType::kF32);
  s.k.attention_backward(dq, dk, dv, d_out, saved_out, saved_lse, q, k, v, q_pos, q_seg, k_pos,
                         k_seg, p, nullptr);
  s.expect("dq", dq, p.head_dim, Metric::kRowRelative, grad_tol);
  s.expect("dk", dk, p.head_dim, Metric::kRowRelative, grad_tol);
  s.expect("dv", dv, p.head_dim, Metric::kRowRelative, grad_tol);
}

void add_attention_cases(std::vector<OpCase>& cases) {
  for (const AttentionLayout& l : attention_layouts()) {
    cases.push_back({"attention_" + l.name + "_f32",
                     [=](Side& s) { run_attention(s, l, DType::kF32, DType::kF32); }});
    for (DType out_t : kFloats) {
      cases.push_back({"attention_" + l.name + "_bf16_out_" + std::string(dtype_name(out_t)),
                       [=](Side& s) { run_attention(s, l, DType::kBF16, out_t); }});
    }
  }
  // Decode: one query per batch row against a cache, a sliding window, one cache row of another
  // sequence; every cache and query dtype, and the int8 cache.
  const AttentionParams p = params(2, 1, 53, 8, 2, 64, 20);
  std::vector<int32_t> k_seg = ones(2 * p.seq_k);
  k_seg[7] = 2;
  const AttentionLayout decode{"decode", p, {40, 52}, {1, 1}, repeat(iota(p.seq_k), 2), k_seg};
  for (DType cache_t : kFloats) {
    for (DType q_t : kFloats) {
      cases.push_back(
          {"single_query_attention_cache_" + dtypes(cache_t, q_t), [=](Side& s) {
             const AttentionShapes shape(decode.p);
             const TensorView q = s.random("q", shape.q, q_t);
             const TensorView k = s.random("k", shape.kv, cache_t);
             const TensorView v = s.random("v", shape.kv, cache_t);
             const TensorView out = s.zeros(shape.q, q_t);
             const TensorView lse = s.zeros(shape.lse, DType::kF32);
             s.k.single_query_attention(out, lse, q, k, v, s.ids(decode.q_pos), s.ids(decode.q_seg),
                                        s.ids(decode.k_pos), s.ids(decode.k_seg), decode.p);
             s.expect("out", out, decode.p.head_dim, Metric::kRowRelative, tol_for(q_t, 1e-5));
             s.expect("lse", lse, 1, Metric::kRowRelative, 1e-5);
           }});
    }
  }
  // A cache long enough for a device to split it into key blocks (kernels/decode_split.h: 5003
  // keys for 16 query rows, blocks that do not divide it), a sliding window leaving the first
  // blocks empty, and a first batch row that sees only the keys up to 3000.
  const AttentionParams long_p = params(2, 1, 5003, 8, 2, 64, 3500);
  const AttentionLayout long_cache{
      "long_cache", long_p, {3000, 5002}, {1, 1}, repeat(iota(long_p.seq_k), 2), ones(2 * 5003)};
  for (DType cache_t : kFloats) {
    cases.push_back(
        {"single_query_attention_long_cache_" + dtypes(cache_t, DType::kF32), [=](Side& s) {
           const AttentionShapes shape(long_cache.p);
           const TensorView q = s.random("q", shape.q, DType::kF32);
           const TensorView k = s.random("k", shape.kv, cache_t);
           const TensorView v = s.random("v", shape.kv, cache_t);
           const TensorView out = s.zeros(shape.q, DType::kF32);
           const TensorView lse = s.zeros(shape.lse, DType::kF32);
           s.k.single_query_attention(out, lse, q, k, v, s.ids(long_cache.q_pos),
                                      s.ids(long_cache.q_seg), s.ids(long_cache.k_pos),
                                      s.ids(long_cache.k_seg), long_cache.p);
           s.expect("out", out, long_cache.p.head_dim, Metric::kRowRelative, 1e-5);
           s.expect("lse", lse, 1, Metric::kRowRelative, 1e-5);
         }});
  }
  cases.push_back({"single_query_attention_int8_cache", [=](Side& s) {
                     const AttentionShapes shape(decode.p);
                     const int64_t rows = decode.p.batch * decode.p.seq_k;
                     const TensorView kf = s.random("k", shape.kv, DType::kF32);
                     const TensorView vf = s.random("v", shape.kv, DType::kF32);
                     const TensorView k_codes = s.zeros(shape.kv, DType::kI8);
                     const TensorView v_codes = s.zeros(shape.kv, DType::kI8);
                     const TensorView k_scale = s.zeros(Shape{rows}, DType::kF32);
                     const TensorView v_scale = s.zeros(Shape{rows}, DType::kF32);
                     s.k.quantize_rows_int8(k_codes, k_scale, kf, kInt8KvLevels);
                     s.k.quantize_rows_int8(v_codes, v_scale, vf, kInt8KvLevels);
                     const TensorView q = s.random("q", shape.q, DType::kF32);
                     const TensorView out = s.zeros(shape.q, DType::kF32);
                     const TensorView lse = s.zeros(shape.lse, DType::kF32);
                     s.k.single_query_attention_int8(
                         out, lse, q, k_codes, k_scale, v_codes, v_scale, s.ids(decode.q_pos),
                         s.ids(decode.q_seg), s.ids(decode.k_pos), s.ids(decode.k_seg), decode.p);
                     s.expect("out", out, decode.p.head_dim, Metric::kRowRelative, 1e-5);
                     s.expect("lse", lse, 1, Metric::kRowRelative, 1e-5);
                   }});
  // Two partials, one with an empty row (lse −inf) and one row empty in both, in place over a.
  cases.push_back({"attention_merge", [](Side& s) {
                     const int64_t B = 2, Sq = 5, H = 3, D = 24;
                     const TensorView out_a = s.random("oa", Shape{B, Sq, H, D}, DType::kF32);
                     const TensorView out_b = s.random("ob", Shape{B, Sq, H, D}, DType::kF32);
                     std::vector<double> la = testing_util::normal_values(B * H * Sq, "la", 0, 2);
                     std::vector<double> lb = testing_util::normal_values(B * H * Sq, "lb", 0, 2);
                     la[4] = -std::numeric_limits<double>::infinity();
                     la[7] = lb[7] = -std::numeric_limits<double>::infinity();
                     const TensorView lse_a = s.values(la, Shape{B, H, Sq}, DType::kF32);
                     const TensorView lse_b = s.values(lb, Shape{B, H, Sq}, DType::kF32);
                     s.k.attention_merge(out_a, lse_a, out_a, lse_a, out_b, lse_b, B, Sq, H, D);
                     s.expect("out", out_a, D, Metric::kRowRelative, 1e-6);
                     s.expect("lse", lse_a, 1, Metric::kRowRelative, 1e-6);
                   }});
}

// The readouts (kernel_ops.inc): results written to the backend's memory, read back here.
void add_readout_cases(std::vector<OpCase>& cases) {
  for (int64_t n : {1, 37, 4099}) {
    for (DType t : kFloats) {
      cases.push_back(
          {"readout_sums_" + std::string(dtype_name(t)) + "_n" + std::to_string(n), [=](Side& s) {
             const TensorView x = s.random("x", Shape{n}, t);
             const TensorView f32 = s.random("x", Shape{n}, DType::kF32);
             DeviceDoubles out;
             out.reserve(s.k, 2);
             s.k.sum_in_order(out.slot(0), f32);
             s.k.sum_of_squares(out.slot(1), x);
             const std::vector<double> sums = out.read(s.k, 2);
             // cpu: element order; a device: its fixed tree (rounding apart).
             s.expect_values("sum_in_order", {sums[0]}, 1, 1e-12);
             s.expect_values("sum_of_squares", {sums[1]}, 1, 1e-12);
             s.k.scale_by_ratio(x, 3.7f, 1.25f);  // two IEEE roundings: exact
             s.expect("scale_by_ratio", x, n, Metric::kRowRelative, kBitForBit);
           }});
    }
  }
  cases.push_back({"readout_arg_max", [](Side& s) {
                     const int64_t N = 9, V = 1001;
                     std::vector<double> logits = testing_util::normal_values(
                         static_cast<size_t>(N * V), "logits", 0.0f, 3.0f);
                     // Row 2: its maximum twice (the first wins); row 6: all equal (index 0).
                     logits[2 * V + 17] = 50.0;
                     logits[2 * V + 900] = 50.0;
                     std::fill_n(logits.begin() + 6 * V, V, 1.0);
                     std::vector<int32_t> targets = testing_util::uniform_ints(N, "targets", V);
                     targets[2] = 17;   // a hit
                     targets[4] = -3;   // masked below: never read
                     targets[6] = 0;    // a hit
                     targets[7] = 900;  // a miss (row 7's arg max is elsewhere)
                     std::vector<double> w(N, 1.0);
                     w[4] = 0.0;
                     w[5] = 0.5;
                     const TensorView view = s.values(logits, Shape{N, V}, DType::kF32);
                     const TensorView weights = s.values(w, Shape{N}, DType::kF32);
                     DeviceIndices ids(s.k, std::vector<int32_t>(N, -1));
                     s.k.arg_max_rows(const_cast<int32_t*>(ids.data()), view);
                     std::vector<int32_t> host(N);
                     s.k.copy_to_host(host.data(), ids.data(), host.size() * sizeof(int32_t));
                     s.expect_values("arg_max_rows", std::vector<double>(host.begin(), host.end()),
                                     N, kBitForBit);
                     DeviceDoubles hits;
                     hits.reserve(s.k, 1);
                     s.k.count_arg_max_hits(hits.slot(0), view, s.ids(targets), weights);
                     s.expect_values("count_arg_max_hits", hits.read(s.k, 1), 1, kBitForBit);
                   }});
}

const std::vector<OpCase>& op_cases() {
  static const std::vector<OpCase> kCases = [] {
    std::vector<OpCase> cases;
    add_elementwise_cases(cases);
    add_row_op_cases(cases);
    add_matmul_cases(cases);
    add_int8_cases(cases);
    add_attention_cases(cases);
    add_readout_cases(cases);
    return cases;
  }();
  return kCases;
}

// ---- the suite ----

class Conformance
    : public ::testing::TestWithParam<std::tuple<const OpCase*, const BackendUnderTest*>> {};

TEST_P(Conformance, MatchesTheCpuBackend) {
  const auto [op_case, under_test] = GetParam();
  std::string why_absent;
  const Kernels* kernels = under_test->find(why_absent);
  if (kernels == nullptr) GTEST_SKIP() << why_absent;
  Side want(cpu()), got(*kernels);
  op_case->run(want);
  op_case->run(got);
  ASSERT_EQ(got.outputs.size(), want.outputs.size());
  for (size_t i = 0; i < want.outputs.size(); ++i) {
    expect_conforms(got.outputs[i], want.outputs[i], under_test->runs_cpu_code);
  }
}

std::vector<const OpCase*> case_pointers() {
  std::vector<const OpCase*> out;
  for (const OpCase& c : op_cases()) out.push_back(&c);
  return out;
}
std::vector<const BackendUnderTest*> backend_pointers() {
  std::vector<const BackendUnderTest*> out;
  for (const BackendUnderTest& b : kBackends) out.push_back(&b);
  return out;
}

INSTANTIATE_TEST_SUITE_P(Ops, Conformance,
                         ::testing::Combine(::testing::ValuesIn(case_pointers()),
                                            ::testing::ValuesIn(backend_pointers())),
                         [](const ::testing::TestParamInfo<Conformance::ParamType>& row) {
                           return std::get<0>(row.param)->name + "__" +
                                  std::get<1>(row.param)->name;
                         });

// ---- properties every backend holds ----

// A failed MAXCTX_CHECK throws here instead of ending the process.
class ThrowingChecks {
 public:
  ThrowingChecks() {
    set_check_handler([](const std::string& message) { throw Error(message); });
  }
  ~ThrowingChecks() { set_check_handler({}); }
};

// Each test skips where its backend is absent from this process.
class EveryBackend : public ::testing::TestWithParam<const BackendUnderTest*> {
 protected:
  void SetUp() override {
    std::string why_absent;
    kernels_ = GetParam()->find(why_absent);
    if (kernels_ == nullptr) GTEST_SKIP() << why_absent;
  }
  const Kernels& kernels() const { return *kernels_; }

 private:
  const Kernels* kernels_ = nullptr;
};

// kernels.h's bf16 rule for the attention backward: d_out is rounded to bf16 before it is used,
// delta = Σ dO·O included. So a d_out and its bf16 rounding give the same gradients, bit for bit;
// a backend that took delta from the unrounded d_out (issue #32, C2) differs.
TEST_P(EveryBackend, Bf16AttentionBackwardUsesTheRoundedDOut) {
  for (const AttentionLayout& l : attention_layouts()) {
    const AttentionParams& p = l.p;
    const AttentionShapes shape(p);
    Side s(kernels());
    const TensorView q = s.random("q", shape.q, DType::kBF16);
    const TensorView k = s.random("k", shape.kv, DType::kBF16);
    const TensorView v = s.random("v", shape.kv, DType::kBF16);
    const int32_t *q_pos = s.ids(l.q_pos), *q_seg = s.ids(l.q_seg);
    const int32_t *k_pos = s.ids(l.k_pos), *k_seg = s.ids(l.k_seg);
    const TensorView out = s.zeros(shape.q, DType::kF32), lse = s.zeros(shape.lse, DType::kF32);
    s.k.attention_forward(out, lse, q, k, v, q_pos, q_seg, k_pos, k_seg, p, nullptr);
    const TensorView d_out = s.random("d_out", shape.q, DType::kF32);
    const TensorView d_out_bf16 = s.zeros(shape.q, DType::kBF16);
    const TensorView d_out_rounded = s.zeros(shape.q, DType::kF32);
    s.k.copy(d_out_bf16, d_out);
    s.k.copy(d_out_rounded, d_out_bf16);
    std::vector<std::vector<double>> grads;
    for (const TensorView& g : {d_out, d_out_rounded}) {
      const TensorView dq = s.zeros(shape.q, DType::kF32), dk = s.zeros(shape.kv, DType::kF32);
      const TensorView dv = s.zeros(shape.kv, DType::kF32);
      s.k.attention_backward(dq, dk, dv, g, out, lse, q, k, v, q_pos, q_seg, k_pos, k_seg, p,
                             nullptr);
      std::vector<double> all;
      for (const TensorView& t : {dq, dk, dv}) {
        const std::vector<double> part = widen(to_host(s.k, t).view());
        all.insert(all.end(), part.begin(), part.end());
      }
      grads.push_back(all);
    }
    ASSERT_EQ(grads[0].size(), grads[1].size());
    EXPECT_EQ(std::memcmp(grads[0].data(), grads[1].data(), grads[0].size() * sizeof(double)), 0)
        << l.name << ": the gradients depend on d_out's bits below bf16";
  }
}

// A bf16 q, k or v view that does not start on a 16-byte boundary is refused by a device backend
// before anything runs (the device kernels load them in 16-byte vectors), with one line naming
// the op, the view and the offset; the cpu backend takes it.
TEST_P(EveryBackend, MisalignedBf16AttentionViewsAreRefusedOnDevices) {
  const ThrowingChecks checks;
  const AttentionParams p = params(1, 4, 4, 2, 2, 64);
  const AttentionShapes shape(p);
  const int64_t q_numel = shape.q.numel(), kv_numel = shape.kv.numel();
  Side s(kernels());
  // k one bf16 element (2 bytes) into its buffer.
  const TensorView q = s.random("q", shape.q, DType::kBF16);
  const TensorView k_buffer = s.random("k", Shape{kv_numel + 8}, DType::kBF16);
  const TensorView k = k_buffer.elements(1, kv_numel);
  const TensorView v = s.random("v", shape.kv, DType::kBF16);
  const std::vector<int32_t> pos = iota(4), seg = ones(4);
  const int32_t *q_pos = s.ids(pos), *q_seg = s.ids(seg), *k_pos = s.ids(pos), *k_seg = s.ids(seg);
  const TensorView out = s.zeros(shape.q, DType::kF32), lse = s.zeros(shape.lse, DType::kF32);
  const TensorView d_out = s.random("d_out", shape.q, DType::kF32);
  const TensorView dq = s.zeros(Shape{q_numel}, DType::kF32);
  const TensorView dk = s.zeros(Shape{kv_numel}, DType::kF32);
  const TensorView dv = s.zeros(Shape{kv_numel}, DType::kF32);
  const auto forward = [&] {
    s.k.attention_forward(out, lse, q, k, v, q_pos, q_seg, k_pos, k_seg, p, nullptr);
  };
  const auto backward = [&] {
    s.k.attention_backward(dq, dk, dv, d_out, out, lse, q, k, v, q_pos, q_seg, k_pos, k_seg, p,
                           nullptr);
  };
  if (s.k.device() == Device::kCpu) {
    EXPECT_NO_THROW(forward());
    EXPECT_NO_THROW(backward());
    return;
  }
  for (const auto& [call, op] :
       {std::pair<std::function<void()>, std::string>{forward, "attention_forward"},
        {backward, "attention_backward"}}) {
    try {
      call();
      ADD_FAILURE() << op << " took a misaligned bf16 k";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(
                    op + ": the bf16 view k starts 2 bytes past a 16-byte boundary; device "
                         "attention loads q, k, v in 16-byte vectors, so their views must start "
                         "on one"),
                std::string::npos)
          << e.what();
    }
  }
  // Refused before any kernel ran: the outputs are as they were.
  for (const TensorView& t : {out, dq}) {
    for (double x : widen(to_host(s.k, t).view())) ASSERT_EQ(x, 0.0);
  }
}

// The backends that compute on the host check ids in the op; cuda does not (that would read the
// device back on every call: the host checks its copies before upload) and gives a NaN row.
TEST_P(EveryBackend, BadTokenIdFailsWithTheReferenceMessage) {
  const ThrowingChecks checks;
  Side s(kernels());
  const int32_t* tokens = s.ids({1, 2, 70, 3});
  const TensorView table = s.random("table", Shape{10, 4}, DType::kF32);
  const TensorView out = s.zeros(Shape{4, 4}, DType::kF32);
  if (!GetParam()->runs_cpu_code) {
    s.k.embedding_forward(out, tokens, table);
    const std::vector<double> rows = widen(to_host(s.k, out).view());
    for (int64_t j = 0; j < 4; ++j) EXPECT_TRUE(std::isnan(rows[2 * 4 + j])) << j;
    EXPECT_FALSE(std::isnan(rows[0]));
    return;
  }
  try {
    s.k.embedding_forward(out, tokens, table);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("token id 70 at row 2 is out of range"), std::string::npos)
        << e.what();
  }
}

// No atomics: the scatter of many repeated ids gives the same bits every run.
TEST_P(EveryBackend, EmbeddingBackwardIsDeterministic) {
  const int64_t V = 50, E = 33, N = 301;
  Side s(kernels());
  const int32_t* tokens = s.ids(testing_util::uniform_ints(N, "tokens", 12));
  const TensorView g = s.random("g", Shape{N, E}, DType::kF32);
  std::vector<std::vector<double>> runs;
  for (int run = 0; run < 2; ++run) {
    const TensorView d_table = s.random("dt", Shape{V, E}, DType::kF32);
    s.k.embedding_backward(d_table, g, tokens);
    runs.push_back(widen(to_host(s.k, d_table).view()));
  }
  EXPECT_EQ(std::memcmp(runs[0].data(), runs[1].data(), runs[0].size() * sizeof(double)), 0);
}

// The time verbs (kernels.h): an upload reads the caller's bytes before it returns (the buffer
// may be reused at once), a download's bytes are there after its event, and both keep the order
// of the stream; small copies go through a device backend's pinned staging, large ones not.
TEST_P(EveryBackend, AsyncCopiesKeepOrderAndArriveByTheirEvent) {
  const Kernels& k = kernels();
  for (const size_t count : {size_t{1}, size_t{37}, size_t{3} << 20}) {  // 12 MiB: not staged
    std::vector<float> values(count), host(count);
    for (size_t i = 0; i < count; ++i) values[i] = 0.25f * static_cast<float>(i % 1001) - 7.0f;
    const Tensor a = k.empty(Shape{static_cast<int64_t>(count)});
    const Tensor b = k.empty(Shape{static_cast<int64_t>(count)});
    host = values;
    k.copy_from_host_async(a.view().raw(), host.data(), count * sizeof(float));
    std::fill(host.begin(), host.end(), -1.0f);  // the upload has its bytes already
    k.add(b.view(), a.view(), a.view());         // ordered after the upload
    std::vector<float> twice(count, 0.0f);
    Event arrived = k.copy_to_host_async(twice.data(), b.view().raw(), count * sizeof(float));
    arrived.synchronize();
    EXPECT_TRUE(arrived.done());
    for (size_t i = 0; i < count; ++i) ASSERT_EQ(twice[i], 2.0f * values[i]) << count << " " << i;
  }
  Event mark = k.record_event();
  k.synchronize();
  EXPECT_TRUE(mark.done());
  mark.synchronize();
}

INSTANTIATE_TEST_SUITE_P(Backends, EveryBackend, ::testing::ValuesIn(backend_pointers()),
                         [](const ::testing::TestParamInfo<EveryBackend::ParamType>& row) {
                           return std::string(row.param->name);
                         });

}  // namespace
}  // namespace maxctx::kernels

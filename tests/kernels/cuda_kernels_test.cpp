// The cuda backend's op table against the cpu backend (and kernels/ref for attention) on the
// same inputs, every op, a few shapes with odd sizes, f32 and bf16 mixes. Each test skips with
// the runtime's reason where this process sees no GPU; the binary then exits 77 (ctest: skipped,
// gpu_test_main.cpp). Tolerances, |gpu − cpu| per row of the op (test_util.h's metrics):
//   fp32 elementwise and row ops: 1e-5 of the row's max (kRowRelative);
//   fp32 reductions over many rows (rmsnorm d_weight, embedding d_table) and attention backward
//     (sums over keys or queries in another order): 1e-4;
//   fp32 GEMM: ‖Δ‖ ≤ 1e-5·‖ref‖ per row (kRowNorm): the same products, another summation order;
//   bf16 products (matmul with bf16 in: both backends multiply the same bf16-rounded operands
//     exactly and sum in fp32): 1e-5 kRowNorm for f32 outputs; a bf16 output adds one rounding
//     on each side, so 2^-7 of the row's max (one bf16 ulp at the max);
//   bf16 outputs of row ops: 2^-7 of the row's max (each side rounds once, half an ulp each);
//   bf16 attention: 2e-2 of the row's max (P is rounded to bf16 after normalizing by the row's
//     global max here, by a running max on the cpu: the rounded P differ by up to an ulp, 2^-8);
//   int8 ops, conversions, copies, embedding forward: bit for bit.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "kernels/test_util.h"
#include "maxctx/core/check.h"
#include "maxctx/core/dtype.h"
#include "maxctx/core/tensor.h"
#include "maxctx/kernels/cuda/devices.h"
#include "maxctx/kernels/kernels.h"
#include "maxctx/kernels/ref/attention.h"

namespace maxctx::kernels {
namespace {

using testing_util::close;
using testing_util::Metric;
using testing_util::normal_values;
using testing_util::uniform_ints;

constexpr double kBf16RowTol = 1.0 / 128;  // 2^-7

#define SKIP_WITHOUT_GPU()                                                 \
  do {                                                                     \
    const cuda::CudaDevices devices = cuda::visible_cuda_devices();        \
    if (devices.count() == 0) GTEST_SKIP() << "no GPU: " << devices.error; \
  } while (0)

const Kernels& cpu() { return backend(Device::kCpu); }
const Kernels& gpu() { return backend(Device::kCuda); }

// One operand on both backends: the same values (rounded to `dtype` once, on the host).
struct Both {
  Tensor host, device;
  TensorView h() const { return host.view(); }
  TensorView d() const { return device.view(); }
};

Both make(const std::vector<double>& values, Shape shape, DType dtype) {
  Both both;
  Tensor f32 = cpu().empty(shape, DType::kF32);
  for (size_t i = 0; i < values.size(); ++i) f32.data<float>()[i] = static_cast<float>(values[i]);
  both.host = cpu().empty(shape, dtype);
  cpu().copy(both.host.view(), f32.view());
  both.device = gpu().empty(shape, dtype);
  gpu().copy_from_host(both.device.view().raw(), both.host.view().raw(), both.host.view().bytes());
  return both;
}
Both random(const std::string& stream, Shape shape, DType dtype, float stddev = 1.0f) {
  return make(normal_values(static_cast<size_t>(shape.numel()), stream, 0.0f, stddev), shape,
              dtype);
}
Both zeros(Shape shape, DType dtype) {
  return make(std::vector<double>(static_cast<size_t>(shape.numel()), 0.0), shape, dtype);
}

std::vector<double> widen(const TensorView& host) {
  std::vector<double> out(static_cast<size_t>(host.numel()));
  for (size_t i = 0; i < out.size(); ++i) {
    switch (host.dtype()) {
      case DType::kF32:
        out[i] = host.data<float>()[i];
        break;
      case DType::kBF16:
        out[i] = bf16_to_float(host.data<bf16>()[i]);
        break;
      case DType::kI8:
        out[i] = host.data<int8_t>()[i];
        break;
    }
  }
  return out;
}
// The device tensor's values, widened (downloaded through the host).
std::vector<double> download(const TensorView& device) {
  Tensor host = cpu().empty(device.shape(), device.dtype());
  gpu().copy_to_host(host.view().raw(), device.raw(), device.bytes());
  return widen(host.view());
}

// Device int32 ids (index arrays live in the backend's memory; a 4-byte tensor holds them).
struct Ids {
  std::vector<int32_t> host;
  Tensor device;
  const int32_t* d() const { return static_cast<const int32_t*>(device.view().raw()); }
};
Ids ids(std::vector<int32_t> values) {
  const auto n = static_cast<int64_t>(values.size());
  Ids out{std::move(values), gpu().empty(Shape{std::max<int64_t>(1, n)})};
  gpu().copy_from_host(out.device.view().raw(), out.host.data(), out.host.size() * 4);
  return out;
}

// Compares the device result with the host result, row by row.
void expect_close(const Both& x, int64_t row, Metric metric, double tol, const std::string& what) {
  EXPECT_TRUE(close(download(x.d()), widen(x.h()), row, metric, tol)) << what;
}
double tol_for(DType out, double f32_tol) { return out == DType::kBF16 ? kBf16RowTol : f32_tol; }
std::string name(DType a, DType b = DType::kF32) {
  return std::string(dtype_name(a)) + "/" + std::string(dtype_name(b));
}

const DType kFloats[] = {DType::kF32, DType::kBF16};

// ---- allocator ----

TEST(CudaAllocator, CopiesZeroesAndDiscards) {
  SKIP_WITHOUT_GPU();
  Tensor t = gpu().empty(Shape{1000});
  EXPECT_EQ(t.device(), Device::kCuda);
  std::vector<float> back(1000, 1.0f);
  gpu().copy_to_host(back.data(), t.view().raw(), 4000);
  for (float v : back) ASSERT_EQ(v, 0.0f);  // zeroed on allocation
  std::vector<float> values(1000);
  for (int i = 0; i < 1000; ++i) values[i] = static_cast<float>(i) + 0.5f;
  gpu().copy_from_host(t.view().raw(), values.data(), 4000);
  gpu().copy_to_host(back.data(), t.view().raw(), 4000);
  EXPECT_EQ(back, values);
  gpu().decommit(t.view().elements(100, 200));
  gpu().copy_to_host(back.data(), t.view().raw(), 4000);
  for (int i = 0; i < 1000; ++i) ASSERT_EQ(back[i], i >= 100 && i < 300 ? 0.0f : values[i]) << i;
  EXPECT_EQ(gpu().allocator().resident_bytes(t.view().raw(), 4000), 4000u);  // cudaMalloc'd
}

TEST(CudaAllocator, ReservedMemoryIsMappedOnCommitAndHandedBackOnDecommit) {
  SKIP_WITHOUT_GPU();
  const Allocator& a = gpu().allocator();
  const int64_t before = a.committed_bytes().value().now;
  const int64_t n = 8 << 20;  // 32 MiB of f32: a virtual-memory allocation
  Tensor t = gpu().empty_reserved(Shape{n});
  EXPECT_EQ(a.committed_bytes().value().now, before);  // address space only
  EXPECT_EQ(a.resident_bytes(t.view().raw(), t.view().bytes()), 0u);
  const TensorView part = t.view().elements(1 << 20, 3 << 20);  // 12 MiB from 4 MiB on
  gpu().commit(part);
  const int64_t held = a.committed_bytes().value().now - before;
  EXPECT_GE(held, int64_t{12} << 20);
  EXPECT_LE(held, int64_t{16} << 20);  // two partial chunks of at most 2 MiB
  std::vector<float> values(static_cast<size_t>(part.numel()), 2.5f);
  gpu().copy_from_host(part.raw(), values.data(), part.bytes());
  gpu().decommit(part);
  EXPECT_LE(a.committed_bytes().value().now - before, int64_t{4} << 20);  // the partial ends
  gpu().commit(part);
  std::vector<float> back(values.size(), 1.0f);
  gpu().copy_to_host(back.data(), part.raw(), part.bytes());
  for (float v : back) ASSERT_EQ(v, 0.0f);  // recommitted pages read as zero
  t = Tensor();
  EXPECT_EQ(a.committed_bytes().value().now, before);
}

// ---- elementwise, copies, optimizer ----

TEST(CudaKernels, ElementwiseOpsMatchCpu) {
  SKIP_WITHOUT_GPU();
  for (int64_t n : {1, 37, 4099}) {
    for (DType out_t : kFloats) {
      for (DType in_t : kFloats) {
        const std::string what = name(out_t, in_t) + " n=" + std::to_string(n);
        Both a = random("a", Shape{n}, in_t), b = random("b", Shape{n}, DType::kF32);
        Both out = zeros(Shape{n}, out_t);
        cpu().add(out.h(), a.h(), b.h());
        gpu().add(out.d(), a.d(), b.d());
        expect_close(out, n, Metric::kRowRelative, tol_for(out_t, 1e-6), "add " + what);
        cpu().add_inplace(out.h(), a.h());
        gpu().add_inplace(out.d(), a.d());
        expect_close(out, n, Metric::kRowRelative, tol_for(out_t, 1e-6), "add_inplace " + what);
        cpu().scale(out.h(), a.h(), 0.37f);
        gpu().scale(out.d(), a.d(), 0.37f);
        expect_close(out, n, Metric::kRowRelative, tol_for(out_t, 1e-6), "scale " + what);
        // Conversions round once to nearest even: the same bits as the cpu backend.
        cpu().copy(out.h(), a.h());
        gpu().copy(out.d(), a.d());
        EXPECT_EQ(download(out.d()), widen(out.h())) << "copy " << what;
        gpu().fill_zero(out.d());
        for (double v : download(out.d())) ASSERT_EQ(v, 0.0);
        // Σ x² in double over a fixed tree: within 1e-12 of the cpu's sum, and deterministic.
        const double want = cpu().sum_of_squares(a.h());
        const double got = gpu().sum_of_squares(a.d());
        EXPECT_NEAR(got, want, 1e-12 * want) << "sum_of_squares " << what;
        EXPECT_EQ(gpu().sum_of_squares(a.d()), got);
      }
    }
  }
}

TEST(CudaKernels, Bf16RoundingIsNearestEvenWithNaN) {
  SKIP_WITHOUT_GPU();
  // Halfway cases, the largest finite values, infinities and NaNs of both signs.
  const std::vector<uint32_t> bits = {0x3f808000u, 0x3f818000u, 0x7f7fffffu, 0xff7fffffu,
                                      0x7f800000u, 0xff800000u, 0x7fc00001u, 0xffa00000u,
                                      0x00000001u, 0x80008000u};
  const auto n = static_cast<int64_t>(bits.size());
  Tensor src = cpu().empty(Shape{n});
  std::memcpy(src.view().raw(), bits.data(), bits.size() * 4);
  Tensor d_src = gpu().empty(Shape{n}), d_dst = gpu().empty(Shape{n}, DType::kBF16);
  gpu().copy_from_host(d_src.view().raw(), src.view().raw(), bits.size() * 4);
  gpu().copy(d_dst.view(), d_src.view());
  std::vector<uint16_t> got(bits.size());
  gpu().copy_to_host(got.data(), d_dst.view().raw(), got.size() * 2);
  for (size_t i = 0; i < bits.size(); ++i) {
    float value;
    std::memcpy(&value, &bits[i], 4);
    EXPECT_EQ(got[i], float_to_bf16(value).bits) << std::hex << bits[i];
  }
}

TEST(CudaKernels, AdamWMatchesCpu) {
  SKIP_WITHOUT_GPU();
  const AdamWStep step{0.9f, 0.999f, 0.1f, 0.001f, 1e-8f, 0.0f, 0.1f, 3e-4f, 0.271f, 0.00299f};
  for (DType param_t : kFloats) {
    const int64_t n = 1031;
    Both p = random("p", Shape{n}, param_t), g = random("g", Shape{n}, DType::kF32);
    Both mu = random("mu", Shape{n}, DType::kF32, 0.1f);
    Both nu = make(testing_util::uniform_values(n, "nu", 0.0f, 0.01f), Shape{n}, DType::kF32);
    for (int it = 0; it < 3; ++it) {
      cpu().adamw_update(p.h(), g.h(), mu.h(), nu.h(), step);
      gpu().adamw_update(p.d(), g.d(), mu.d(), nu.d(), step);
    }
    // Separate roundings (no FMA) in the cpu's order: 1e-6 leaves room for the sqrt/division.
    expect_close(p, n, Metric::kRowRelative, tol_for(param_t, 1e-6), "params " + name(param_t));
    expect_close(mu, n, Metric::kRowRelative, 1e-6, "mu " + name(param_t));
    expect_close(nu, n, Metric::kRowRelative, 1e-6, "nu " + name(param_t));
  }
}

// ---- row ops ----

TEST(CudaKernels, RmsNormMatchesCpu) {
  SKIP_WITHOUT_GPU();
  for (auto [N, D] : {std::pair<int64_t, int64_t>{1, 7}, {13, 96}, {5, 1031}}) {
    for (DType t : kFloats) {
      const std::string what = name(t) + " N=" + std::to_string(N) + " D=" + std::to_string(D);
      Both in = random("in", Shape{N, D}, t), w = random("w", Shape{D}, t);
      Both out = zeros(Shape{N, D}, t), rstd = zeros(Shape{N}, DType::kF32);
      cpu().rmsnorm_forward(out.h(), rstd.h(), in.h(), w.h(), 1e-5f);
      gpu().rmsnorm_forward(out.d(), rstd.d(), in.d(), w.d(), 1e-5f);
      expect_close(out, D, Metric::kRowRelative, tol_for(t, 1e-5), "rmsnorm out " + what);
      expect_close(rstd, 1, Metric::kRowRelative, 1e-5, "rmsnorm rstd " + what);
      Both g = random("g", Shape{N, D}, t), d_in = zeros(Shape{N, D}, t);
      Both d_w = random("dw", Shape{D}, DType::kF32);  // accumulated into
      cpu().rmsnorm_backward(d_in.h(), d_w.h(), g.h(), in.h(), w.h(), rstd.h());
      gpu().rmsnorm_backward(d_in.d(), d_w.d(), g.d(), in.d(), w.d(), rstd.d());
      expect_close(d_in, D, Metric::kRowRelative, tol_for(t, 1e-5), "rmsnorm d_in " + what);
      expect_close(d_w, D, Metric::kRowRelative, 1e-4, "rmsnorm d_weight " + what);
    }
  }
}

TEST(CudaKernels, RopeMatchesCpu) {
  SKIP_WITHOUT_GPU();
  RopeParams params;
  params.theta = 500000.0;
  params.scaling = RopeScaling::kLlama3;
  const int64_t N = 11, H = 3, D = 64;
  std::vector<int32_t> positions(N);
  for (int64_t n = 0; n < N; ++n) positions[n] = static_cast<int32_t>(n * 9973 + 17);
  Ids pos = ids(positions);
  Both cos = zeros(Shape{N, D / 2}, DType::kF32), sin = zeros(Shape{N, D / 2}, DType::kF32);
  cpu().rope_cos_sin(cos.h(), sin.h(), pos.host.data(), params);
  gpu().rope_cos_sin(cos.d(), sin.d(), pos.d(), params);
  // Angles in double, rounded once: the device's and glibc's double cos/sin differ by at most
  // an ulp of double, which rounds to the same float but in rare ties (1e-7 covers one).
  expect_close(cos, D / 2, Metric::kRowRelative, 1e-7, "cos");
  expect_close(sin, D / 2, Metric::kRowRelative, 1e-7, "sin");
  // The same tables on both sides from here on.
  gpu().copy_from_host(cos.d().raw(), cos.h().raw(), cos.h().bytes());
  gpu().copy_from_host(sin.d().raw(), sin.h().raw(), sin.h().bytes());
  for (DType t : kFloats) {
    Both x = random("x", Shape{N, H, D}, t), out = zeros(Shape{N, H, D}, t);
    cpu().rope_forward(out.h(), x.h(), cos.h(), sin.h());
    gpu().rope_forward(out.d(), x.d(), cos.d(), sin.d());
    expect_close(out, D, Metric::kRowRelative, tol_for(t, 1e-6), "rope forward " + name(t));
    cpu().rope_backward(x.h(), x.h(), cos.h(), sin.h());  // in place
    gpu().rope_backward(x.d(), x.d(), cos.d(), sin.d());
    expect_close(x, D, Metric::kRowRelative, tol_for(t, 1e-6), "rope backward " + name(t));
  }
}

TEST(CudaKernels, SwigluMatchesCpu) {
  SKIP_WITHOUT_GPU();
  const int64_t N = 7, F = 333;
  for (DType t : kFloats) {
    Both gate = random("gate", Shape{N, F}, t, 3.0f), up = random("up", Shape{N, F}, t);
    Both out = zeros(Shape{N, F}, t);
    cpu().swiglu_forward(out.h(), gate.h(), up.h());
    gpu().swiglu_forward(out.d(), gate.d(), up.d());
    expect_close(out, F, Metric::kRowRelative, tol_for(t, 1e-5), "swiglu forward " + name(t));
    Both g = random("g", Shape{N, F}, t), d_gate = zeros(Shape{N, F}, t),
         d_up = zeros(Shape{N, F}, t);
    cpu().swiglu_backward(d_gate.h(), d_up.h(), g.h(), gate.h(), up.h());
    gpu().swiglu_backward(d_gate.d(), d_up.d(), g.d(), gate.d(), up.d());
    expect_close(d_gate, F, Metric::kRowRelative, tol_for(t, 1e-5), "d_gate " + name(t));
    expect_close(d_up, F, Metric::kRowRelative, tol_for(t, 1e-5), "d_up " + name(t));
  }
}

TEST(CudaKernels, CrossEntropyMatchesCpu) {
  SKIP_WITHOUT_GPU();
  const int64_t N = 9, V = 1001;
  std::vector<int32_t> target_ids = uniform_ints(N, "targets", V);
  target_ids[3] = -5;  // a masked row's target is never read
  Ids targets = ids(target_ids);
  std::vector<double> w(N, 1.0);
  w[3] = 0.0;
  w[5] = 0.5;
  Both weights = make(w, Shape{N}, DType::kF32);
  for (DType t : kFloats) {
    Both logits = random("logits", Shape{N, V}, t, 4.0f);
    Both loss = zeros(Shape{N}, DType::kF32), lse = zeros(Shape{N}, DType::kF32);
    cpu().cross_entropy_forward(loss.h(), lse.h(), logits.h(), targets.host.data(), weights.h());
    gpu().cross_entropy_forward(loss.d(), lse.d(), logits.d(), targets.d(), weights.d());
    expect_close(loss, 1, Metric::kRowRelative, 1e-5, "loss " + name(t));
    expect_close(lse, 1, Metric::kRowRelative, 1e-5, "lse " + name(t));
    cpu().cross_entropy_backward(logits.h(), logits.h(), lse.h(), targets.host.data(), weights.h(),
                                 0.125f);  // in place
    gpu().cross_entropy_backward(logits.d(), logits.d(), lse.d(), targets.d(), weights.d(), 0.125f);
    expect_close(logits, V, Metric::kRowRelative, tol_for(t, 1e-5), "d_logits " + name(t));
  }
}

TEST(CudaKernels, EmbeddingMatchesCpuAndBackwardIsDeterministic) {
  SKIP_WITHOUT_GPU();
  const int64_t V = 50, E = 33, N = 301;
  Ids tokens = ids(uniform_ints(N, "tokens", 12));  // many repeats
  for (DType t : kFloats) {
    Both table = random("table", Shape{V, E}, t), out = zeros(Shape{N, E}, t);
    cpu().embedding_forward(out.h(), tokens.host.data(), table.h());
    gpu().embedding_forward(out.d(), tokens.d(), table.d());
    EXPECT_EQ(download(out.d()), widen(out.h())) << name(t);
    Both g = random("g", Shape{N, E}, t), d_table = random("dt", Shape{V, E}, DType::kF32);
    const std::vector<double> start = widen(d_table.h());
    cpu().embedding_backward(d_table.h(), g.h(), tokens.host.data());
    gpu().embedding_backward(d_table.d(), g.d(), tokens.d());
    const std::vector<double> first = download(d_table.d());
    expect_close(d_table, E, Metric::kRowRelative, 1e-5, "d_table " + name(t));
    // Again from the same start: the same bits (no atomics).
    Both again = make(start, Shape{V, E}, DType::kF32);
    gpu().embedding_backward(again.d(), g.d(), tokens.d());
    EXPECT_EQ(download(again.d()), first);
  }
}

TEST(CudaKernels, BadIdsFailWithTheReferenceMessage) {
  SKIP_WITHOUT_GPU();
  set_check_handler([](const std::string& message) { throw Error(message); });
  Ids tokens = ids({1, 2, 70, 3});
  Both table = random("table", Shape{10, 4}, DType::kF32), out = zeros(Shape{4, 4}, DType::kF32);
  try {
    gpu().embedding_forward(out.d(), tokens.d(), table.d());
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("token id 70 at row 2 is out of range"), std::string::npos)
        << e.what();
  }
  set_check_handler(nullptr);
}

// ---- GEMM ----

struct GemmShape {
  int64_t N, in, out;
};
const GemmShape kGemmShapes[] = {{1, 17, 5}, {7, 33, 65}, {64, 128, 96}, {130, 257, 31}};

TEST(CudaKernels, MatmulMatchesCpu) {
  SKIP_WITHOUT_GPU();
  for (const GemmShape& s : kGemmShapes) {
    for (DType in_t : kFloats) {
      for (DType w_t : kFloats) {
        for (DType out_t : kFloats) {
          const std::string what = "in " + name(in_t, w_t) + " out " +
                                   std::string(dtype_name(out_t)) + " " + std::to_string(s.N) +
                                   "x" + std::to_string(s.in) + "x" + std::to_string(s.out);
          const double tol = out_t == DType::kBF16 ? kBf16RowTol : 1e-5;
          const Metric metric = out_t == DType::kBF16 ? Metric::kRowRelative : Metric::kRowNorm;
          Both in = random("in", Shape{s.N, s.in}, in_t), w = random("w", Shape{s.out, s.in}, w_t);
          Both out = zeros(Shape{s.N, s.out}, out_t);
          cpu().matmul_forward(out.h(), in.h(), w.h());
          gpu().matmul_forward(out.d(), in.d(), w.d());
          expect_close(out, s.out, metric, tol, "forward " + what);
          // d_weight accumulates onto what is there; d_in overwritten, then accumulated.
          Both g = random("g", Shape{s.N, s.out}, out_t);
          Both d_w = random("dw", Shape{s.out, s.in}, DType::kF32);
          Both d_in = random("din", Shape{s.N, s.in}, out_t);
          cpu().matmul_backward(d_in.h(), d_w.h(), g.h(), in.h(), w.h());
          gpu().matmul_backward(d_in.d(), d_w.d(), g.d(), in.d(), w.d());
          expect_close(d_in, s.in, metric, tol, "d_in " + what);
          expect_close(d_w, s.in, Metric::kRowNorm, 1e-5, "d_weight " + what);
          cpu().matmul_backward_accumulate_input(d_in.h(), d_w.h(), g.h(), in.h(), w.h());
          gpu().matmul_backward_accumulate_input(d_in.d(), d_w.d(), g.d(), in.d(), w.d());
          expect_close(d_in, s.in, metric, tol, "d_in += " + what);
          expect_close(d_w, s.in, Metric::kRowNorm, 1e-5, "d_weight twice " + what);
          // An empty d_in skips the input gradient.
          gpu().matmul_backward(TensorView(), d_w.d(), g.d(), in.d(), w.d());
          cpu().matmul_backward(TensorView(), d_w.h(), g.h(), in.h(), w.h());
          expect_close(d_w, s.in, Metric::kRowNorm, 1e-5, "d_weight only " + what);
        }
      }
    }
  }
}

// ---- int8 ----

TEST(CudaKernels, Int8OpsMatchCpuBitForBit) {
  SKIP_WITHOUT_GPU();
  for (auto [N, in_dim, out_dim] : {std::tuple<int64_t, int64_t, int64_t>{1, 5, 3}, {9, 130, 37}}) {
    for (DType t : kFloats) {
      Both w = random("w", Shape{out_dim, in_dim}, t), x = random("x", Shape{N, in_dim}, t);
      const Int8Weights cw = cpu().int8_pack_weights(w.h());
      const Int8Weights gw = gpu().int8_pack_weights(w.d());
      EXPECT_EQ(gw.scale, cw.scale);
      EXPECT_EQ(gw.row_sum, cw.row_sum);
      Int8Rows crows, grows;
      cpu().int8_quantize_rows(crows, x.h());
      gpu().int8_quantize_rows(grows, x.d());
      Both out = zeros(Shape{N, out_dim}, t);
      cpu().int8_matmul_forward(out.h(), crows, cw);
      gpu().int8_matmul_forward(out.d(), grows, gw);
      EXPECT_EQ(download(out.d()), widen(out.h())) << "int8 matmul " << name(t);
      // Packing codes already quantized gives the same weight.
      Both codes = zeros(Shape{out_dim, in_dim}, DType::kI8),
           scale = zeros(Shape{out_dim}, DType::kF32);
      cpu().quantize_rows_int8(codes.h(), scale.h(), w.h(), kInt8Levels);
      gpu().quantize_rows_int8(codes.d(), scale.d(), w.d(), kInt8Levels);
      EXPECT_EQ(download(codes.d()), widen(codes.h()));
      EXPECT_EQ(download(scale.d()), widen(scale.h()));
      const Int8Weights from_codes = gpu().int8_pack_codes(codes.d(), scale.d());
      gpu().int8_matmul_forward(out.d(), grows, from_codes);
      EXPECT_EQ(download(out.d()), widen(out.h())) << "int8 matmul from codes " << name(t);
      // The KV cache's levels, and back.
      cpu().quantize_rows_int8(codes.h(), scale.h(), w.h(), kInt8KvLevels);
      gpu().quantize_rows_int8(codes.d(), scale.d(), w.d(), kInt8KvLevels);
      EXPECT_EQ(download(codes.d()), widen(codes.h()));
      Both back = zeros(Shape{out_dim, in_dim}, t);
      cpu().dequantize_rows_int8(back.h(), codes.h(), scale.h());
      gpu().dequantize_rows_int8(back.d(), codes.d(), scale.d());
      EXPECT_EQ(download(back.d()), widen(back.h())) << "dequantize " << name(t);
    }
  }
}

// ---- attention ----

struct AttentionCase {
  std::string name;
  AttentionParams p;
  std::vector<int32_t> q_pos, q_seg, k_pos, k_seg;  // (B, Sq), (B, Sk)
};

std::vector<int32_t> iota(int64_t n, int32_t from = 0) {
  std::vector<int32_t> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[i] = from + static_cast<int32_t>(i);
  return v;
}
std::vector<int32_t> repeat(const std::vector<int32_t>& v, int64_t times) {
  std::vector<int32_t> out;
  for (int64_t t = 0; t < times; ++t) out.insert(out.end(), v.begin(), v.end());
  return out;
}

AttentionParams params(int64_t B, int64_t Sq, int64_t Sk, int64_t Hq, int64_t Hkv, int64_t D,
                       int32_t window = 0) {
  AttentionParams p;
  p.batch = B, p.seq_q = Sq, p.seq_k = Sk, p.heads_q = Hq, p.heads_kv = Hkv, p.head_dim = D;
  p.sliding_window = window;
  return p;
}

std::vector<AttentionCase> attention_cases() {
  std::vector<AttentionCase> cases;
  // Causal self-attention, two batch rows, odd length and head dim.
  const int64_t S = 37;
  cases.push_back({"causal", params(2, S, S, 2, 2, 40), repeat(iota(S), 2),
                   std::vector<int32_t>(2 * S, 1), repeat(iota(S), 2),
                   std::vector<int32_t>(2 * S, 1)});
  // The dual chunk swap (load_balance, context = 2): rank 0's queries are chunks 0 and 3 of
  // four, against every key.
  const int64_t c = 12;
  std::vector<int32_t> swapped = iota(c);
  const std::vector<int32_t> last = iota(c, 3 * c);
  swapped.insert(swapped.end(), last.begin(), last.end());
  cases.push_back({"dual_chunk_swap", params(1, 2 * c, 4 * c, 4, 1, 64), swapped,
                   std::vector<int32_t>(2 * c, 1), iota(4 * c), std::vector<int32_t>(4 * c, 1)});
  // Packed segments (positions restart), with query rows of a segment no key has (no visible
  // key: out 0, lse −inf).
  std::vector<int32_t> pos, seg;
  for (auto [id, len] : {std::pair<int32_t, int32_t>{1, 10}, {2, 15}, {3, 6}}) {
    const std::vector<int32_t> p = iota(len);
    pos.insert(pos.end(), p.begin(), p.end());
    seg.insert(seg.end(), static_cast<size_t>(len), id);
  }
  std::vector<int32_t> k_seg = seg;
  for (int32_t& s : k_seg) s = s == 3 ? 4 : s;
  cases.push_back({"packed_segments", params(1, 31, 31, 4, 2, 32), pos, seg, pos, k_seg});
  // Sliding window, GQA (4 query heads per kv head).
  cases.push_back({"sliding_window_gqa", params(1, 45, 45, 8, 2, 128, 7), iota(45),
                   std::vector<int32_t>(45, 1), iota(45), std::vector<int32_t>(45, 1)});
  return cases;
}

// Equal −inf positions, then the rest compared as rows of `row`.
void expect_lse_close(const std::vector<double>& got, const std::vector<double>& want, double tol,
                      const std::string& what) {
  std::vector<double> g = got, w = want;
  for (size_t i = 0; i < g.size(); ++i) {
    ASSERT_EQ(std::isinf(g[i]), std::isinf(w[i])) << what << " lse " << i;
    if (std::isinf(g[i])) g[i] = w[i] = 0;
  }
  EXPECT_TRUE(close(g, w, 1, Metric::kRowRelative, tol)) << what << " lse";
}

TEST(CudaAttentionReference, Fp32MatchesTheDoubleReference) {
  SKIP_WITHOUT_GPU();
  for (const AttentionCase& c : attention_cases()) {
    const AttentionParams& p = c.p;
    const Shape q_shape{p.batch, p.seq_q, p.heads_q, p.head_dim};
    const Shape kv_shape{p.batch, p.seq_k, p.heads_kv, p.head_dim};
    const Shape lse_shape{p.batch, p.heads_q, p.seq_q};
    Both q = random("q", q_shape, DType::kF32), k = random("k", kv_shape, DType::kF32);
    Both v = random("v", kv_shape, DType::kF32);
    Ids qp = ids(c.q_pos), qs = ids(c.q_seg), kp = ids(c.k_pos), ks = ids(c.k_seg);
    Both out = zeros(q_shape, DType::kF32), lse = zeros(lse_shape, DType::kF32);
    AttentionStats got_stats, want_stats;
    gpu().attention_forward(out.d(), lse.d(), q.d(), k.d(), v.d(), qp.d(), qs.d(), kp.d(), ks.d(),
                            p, &got_stats);
    // The oracle: kernels/ref in double on the same values.
    std::vector<double> qd = widen(q.h()), kd = widen(k.h()), vd = widen(v.h());
    std::vector<double> want_out(qd.size()), want_lse(static_cast<size_t>(lse_shape.numel()));
    ref::attention_forward<double>(want_out.data(), want_lse.data(), qd.data(), kd.data(),
                                   vd.data(), c.q_pos.data(), c.q_seg.data(), c.k_pos.data(),
                                   c.k_seg.data(), p, &want_stats);
    EXPECT_TRUE(close(download(out.d()), want_out, p.head_dim, Metric::kRowRelative, 1e-5))
        << c.name << " out";
    expect_lse_close(download(lse.d()), want_lse, 1e-5, c.name);
    EXPECT_EQ(got_stats.blocks_computed, want_stats.blocks_computed) << c.name;
    EXPECT_EQ(got_stats.blocks_skipped, want_stats.blocks_skipped) << c.name;

    // Backward from the reference's out and lse, accumulating onto nonzero gradients.
    Both d_out = random("d_out", q_shape, DType::kF32);
    Both ref_out = make(want_out, q_shape, DType::kF32);
    std::vector<double> lse_f = want_lse;
    Both ref_lse = make(lse_f, lse_shape, DType::kF32);
    Both dq = random("dq", q_shape, DType::kF32), dk = random("dk", kv_shape, DType::kF32);
    Both dv = random("dv", kv_shape, DType::kF32);
    std::vector<double> want_dq = widen(dq.h()), want_dk = widen(dk.h()), want_dv = widen(dv.h());
    gpu().attention_backward(dq.d(), dk.d(), dv.d(), d_out.d(), ref_out.d(), ref_lse.d(), q.d(),
                             k.d(), v.d(), qp.d(), qs.d(), kp.d(), ks.d(), p, nullptr);
    std::vector<double> god = widen(d_out.h()), outd = widen(ref_out.h()),
                        lsed = widen(ref_lse.h());
    ref::attention_backward<double>(want_dq.data(), want_dk.data(), want_dv.data(), god.data(),
                                    outd.data(), lsed.data(), qd.data(), kd.data(), vd.data(),
                                    c.q_pos.data(), c.q_seg.data(), c.k_pos.data(), c.k_seg.data(),
                                    p, nullptr);
    EXPECT_TRUE(close(download(dq.d()), want_dq, p.head_dim, Metric::kRowRelative, 1e-4))
        << c.name << " dq";
    EXPECT_TRUE(close(download(dk.d()), want_dk, p.head_dim, Metric::kRowRelative, 1e-4))
        << c.name << " dk";
    EXPECT_TRUE(close(download(dv.d()), want_dv, p.head_dim, Metric::kRowRelative, 1e-4))
        << c.name << " dv";
  }
}

TEST(CudaAttentionReference, Bf16MatchesTheCpuBackend) {
  SKIP_WITHOUT_GPU();
  for (const AttentionCase& c : attention_cases()) {
    if (c.p.head_dim % 2 != 0) continue;  // bf16 attention multiplies pairs along D
    const AttentionParams& p = c.p;
    const Shape q_shape{p.batch, p.seq_q, p.heads_q, p.head_dim};
    const Shape kv_shape{p.batch, p.seq_k, p.heads_kv, p.head_dim};
    const Shape lse_shape{p.batch, p.heads_q, p.seq_q};
    Both q = random("q", q_shape, DType::kBF16), k = random("k", kv_shape, DType::kBF16);
    Both v = random("v", kv_shape, DType::kBF16);
    Ids qp = ids(c.q_pos), qs = ids(c.q_seg), kp = ids(c.k_pos), ks = ids(c.k_seg);
    for (DType out_t : kFloats) {
      const std::string what = c.name + " out " + std::string(dtype_name(out_t));
      Both out = zeros(q_shape, out_t), lse = zeros(lse_shape, DType::kF32);
      cpu().attention_forward(out.h(), lse.h(), q.h(), k.h(), v.h(), c.q_pos.data(), c.q_seg.data(),
                              c.k_pos.data(), c.k_seg.data(), p, nullptr);
      gpu().attention_forward(out.d(), lse.d(), q.d(), k.d(), v.d(), qp.d(), qs.d(), kp.d(), ks.d(),
                              p, nullptr);
      expect_close(out, p.head_dim, Metric::kRowRelative, 2e-2, what + " out");
      expect_lse_close(download(lse.d()), widen(lse.h()), 1e-5, what);
      // Backward on the cpu's out and lse (both sides the same saved statistics).
      gpu().copy_from_host(out.d().raw(), out.h().raw(), out.h().bytes());
      gpu().copy_from_host(lse.d().raw(), lse.h().raw(), lse.h().bytes());
      Both d_out = random("d_out", q_shape, out_t);
      Both dq = zeros(q_shape, DType::kF32), dk = zeros(kv_shape, DType::kF32);
      Both dv = zeros(kv_shape, DType::kF32);
      cpu().attention_backward(dq.h(), dk.h(), dv.h(), d_out.h(), out.h(), lse.h(), q.h(), k.h(),
                               v.h(), c.q_pos.data(), c.q_seg.data(), c.k_pos.data(),
                               c.k_seg.data(), p, nullptr);
      gpu().attention_backward(dq.d(), dk.d(), dv.d(), d_out.d(), out.d(), lse.d(), q.d(), k.d(),
                               v.d(), qp.d(), qs.d(), kp.d(), ks.d(), p, nullptr);
      expect_close(dq, p.head_dim, Metric::kRowRelative, 2e-2, what + " dq");
      expect_close(dk, p.head_dim, Metric::kRowRelative, 2e-2, what + " dk");
      expect_close(dv, p.head_dim, Metric::kRowRelative, 2e-2, what + " dv");
    }
  }
}

TEST(CudaAttentionReference, BackwardIsDeterministic) {
  SKIP_WITHOUT_GPU();
  const AttentionCase c = attention_cases()[3];
  const AttentionParams& p = c.p;
  const Shape q_shape{p.batch, p.seq_q, p.heads_q, p.head_dim};
  const Shape kv_shape{p.batch, p.seq_k, p.heads_kv, p.head_dim};
  Both q = random("q", q_shape, DType::kF32), k = random("k", kv_shape, DType::kF32);
  Both v = random("v", kv_shape, DType::kF32), d_out = random("d_out", q_shape, DType::kF32);
  Ids qp = ids(c.q_pos), qs = ids(c.q_seg), kp = ids(c.k_pos), ks = ids(c.k_seg);
  Both out = zeros(q_shape, DType::kF32),
       lse = zeros(Shape{p.batch, p.heads_q, p.seq_q}, DType::kF32);
  gpu().attention_forward(out.d(), lse.d(), q.d(), k.d(), v.d(), qp.d(), qs.d(), kp.d(), ks.d(), p,
                          nullptr);
  std::vector<std::vector<double>> runs;
  for (int run = 0; run < 2; ++run) {
    Both dq = zeros(q_shape, DType::kF32), dk = zeros(kv_shape, DType::kF32);
    Both dv = zeros(kv_shape, DType::kF32);
    gpu().attention_backward(dq.d(), dk.d(), dv.d(), d_out.d(), out.d(), lse.d(), q.d(), k.d(),
                             v.d(), qp.d(), qs.d(), kp.d(), ks.d(), p, nullptr);
    std::vector<double> all = download(dq.d());
    for (const Both* t : {&dk, &dv}) {
      const std::vector<double> part = download(t->d());
      all.insert(all.end(), part.begin(), part.end());
    }
    runs.push_back(all);
  }
  EXPECT_EQ(runs[0], runs[1]);
}

TEST(CudaAttentionReference, DecodeAndMergeMatchCpu) {
  SKIP_WITHOUT_GPU();
  const AttentionParams p = params(2, 1, 53, 8, 2, 64, 20);
  const Shape q_shape{p.batch, 1, p.heads_q, p.head_dim};
  const Shape kv_shape{p.batch, p.seq_k, p.heads_kv, p.head_dim};
  const Shape lse_shape{p.batch, p.heads_q, 1};
  std::vector<int32_t> k_pos = repeat(iota(p.seq_k), 2), k_seg(2 * p.seq_k, 1);
  k_seg[7] = 2;  // one cache row of another sequence
  Ids qp = ids({40, 52}), qs = ids({1, 1}), kp = ids(k_pos), ks = ids(k_seg);
  for (DType cache_t : kFloats) {
    for (DType q_t : kFloats) {
      const std::string what = "cache " + name(cache_t, q_t);
      Both q = random("q", q_shape, q_t), k = random("k", kv_shape, cache_t);
      Both v = random("v", kv_shape, cache_t);
      Both out = zeros(q_shape, q_t), lse = zeros(lse_shape, DType::kF32);
      cpu().single_query_attention(out.h(), lse.h(), q.h(), k.h(), v.h(), qp.host.data(),
                                   qs.host.data(), kp.host.data(), ks.host.data(), p);
      gpu().single_query_attention(out.d(), lse.d(), q.d(), k.d(), v.d(), qp.d(), qs.d(), kp.d(),
                                   ks.d(), p);
      expect_close(out, p.head_dim, Metric::kRowRelative, tol_for(q_t, 1e-5), what);
      expect_lse_close(download(lse.d()), widen(lse.h()), 1e-5, what);
    }
  }
  // The int8 cache: codes and one scale per cache row.
  const int64_t rows = p.batch * p.seq_k;
  Both kf = random("k", kv_shape, DType::kF32), vf = random("v", kv_shape, DType::kF32);
  Both k_codes = zeros(kv_shape, DType::kI8), v_codes = zeros(kv_shape, DType::kI8);
  Both k_scale = zeros(Shape{rows}, DType::kF32), v_scale = zeros(Shape{rows}, DType::kF32);
  for (const Kernels* be : {&cpu(), &gpu()}) {
    const bool host = be == &cpu();
    be->quantize_rows_int8(host ? k_codes.h() : k_codes.d(), host ? k_scale.h() : k_scale.d(),
                           host ? kf.h() : kf.d(), kInt8KvLevels);
    be->quantize_rows_int8(host ? v_codes.h() : v_codes.d(), host ? v_scale.h() : v_scale.d(),
                           host ? vf.h() : vf.d(), kInt8KvLevels);
  }
  Both q = random("q", q_shape, DType::kF32), out = zeros(q_shape, DType::kF32);
  Both lse = zeros(lse_shape, DType::kF32);
  cpu().single_query_attention_int8(out.h(), lse.h(), q.h(), k_codes.h(), k_scale.h(), v_codes.h(),
                                    v_scale.h(), qp.host.data(), qs.host.data(), kp.host.data(),
                                    ks.host.data(), p);
  gpu().single_query_attention_int8(out.d(), lse.d(), q.d(), k_codes.d(), k_scale.d(), v_codes.d(),
                                    v_scale.d(), qp.d(), qs.d(), kp.d(), ks.d(), p);
  expect_close(out, p.head_dim, Metric::kRowRelative, 1e-5, "int8 cache");
  expect_lse_close(download(lse.d()), widen(lse.h()), 1e-5, "int8 cache");

  // Merge two partials, one of them with an empty row (lse −inf), in place over a.
  const int64_t B = 2, Sq = 5, H = 3, D = 24;
  Both out_a = random("oa", Shape{B, Sq, H, D}, DType::kF32);
  Both out_b = random("ob", Shape{B, Sq, H, D}, DType::kF32);
  std::vector<double> la = normal_values(B * H * Sq, "la", 0, 2),
                      lb = normal_values(B * H * Sq, "lb", 0, 2);
  la[4] = -std::numeric_limits<double>::infinity();
  la[7] = lb[7] = -std::numeric_limits<double>::infinity();
  Both lse_a = make(la, Shape{B, H, Sq}, DType::kF32),
       lse_b = make(lb, Shape{B, H, Sq}, DType::kF32);
  cpu().attention_merge(out_a.h(), lse_a.h(), out_a.h(), lse_a.h(), out_b.h(), lse_b.h(), B, Sq, H,
                        D);
  gpu().attention_merge(out_a.d(), lse_a.d(), out_a.d(), lse_a.d(), out_b.d(), lse_b.d(), B, Sq, H,
                        D);
  expect_close(out_a, D, Metric::kRowRelative, 1e-6, "merge out");
  expect_lse_close(download(lse_a.d()), widen(lse_a.h()), 1e-6, "merge");
}

}  // namespace
}  // namespace maxctx::kernels

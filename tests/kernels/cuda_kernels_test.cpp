// What the cuda backend holds beyond backend_conformance_test (which runs every op of the table
// on it against the cpu backend): its allocator, and its plain device attention (the oracle the
// flash kernels are tested against, cuda_attention_test) against kernels/ref in double, tile
// counts included, and its backward's determinism. Each test skips with the runtime's reason
// where this process sees no GPU; the binary then exits 77 (ctest: skipped, gpu_test_main.cpp).
// Tolerances, |gpu − ref<double>| per row (test_util.h's metrics): forward 1e-5 of the row's
// max; backward 1e-4 (sums over keys or queries in another order).
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "kernels/attention_layouts.h"
#include "kernels/test_util.h"
#include "maxctx/core/dtype.h"
#include "maxctx/core/tensor.h"
#include "maxctx/kernels/cuda/devices.h"
#include "maxctx/kernels/kernels.h"
#include "maxctx/kernels/ref/attention.h"

namespace maxctx::kernels {
namespace {

using testing_util::attention_layouts;
using testing_util::AttentionLayout;
using testing_util::close;
using testing_util::Metric;
using testing_util::normal_values;
using testing_util::widen;

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

// ---- attention ----

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
  for (const AttentionLayout& c : attention_layouts()) {
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

TEST(CudaAttentionReference, BackwardIsDeterministic) {
  SKIP_WITHOUT_GPU();
  const AttentionLayout c = attention_layouts()[3];
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

}  // namespace
}  // namespace maxctx::kernels

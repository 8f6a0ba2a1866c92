// The CUDA flash attention (kernels/cuda/flash_attention.h) against the plain reference
// (kernels/ref/attention.h, run on the host) on the layouts context parallelism produces: causal,
// the dual chunk swap's reordered positions (a rank's query shard against the whole sequence),
// packed segments, a sliding window, GQA with 4 query heads per kv head, ragged lengths (no
// multiple of any tile) and query rows that see no key; f32 and bf16, head_dim 64 and 128.
//
// Bounds, with e = max|got - want| over a tensor and M = max(1, max|want|):
//   f32 (FFMA, no TF32): out, lse, dq, dk, dv: e <= 1e-4·M (the GPU bound).
//   bf16 (inputs rounded to bf16 on the host, so the reference sees the same values; the kernel
//   additionally rounds P, and in the backward d_out and dS, to bf16: relative 2^-9 each):
//     lse: e <= 1e-4·M (scores are exact products with fp32 sums: only the order differs)
//     out: e <= 1e-2·M;  dq, dk, dv: e <= 2e-2·M.
// The backward accumulates (+=) into nonzero dq/dk/dv, and its bits are the same on a second run.
// Everything that needs a GPU skips (GTEST_SKIP, with the runtime's reason) where there is none;
// the argument checks run everywhere.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "maxctx/core/check.h"
#include "maxctx/core/dtype.h"
#include "maxctx/kernels/cuda/devices.h"
#include "maxctx/kernels/cuda/flash_attention.h"
#include "maxctx/kernels/ref/attention.h"
#include "maxctx/parallel/load_balance.h"

namespace maxctx::kernels::cuda {
namespace {

#define SKIP_WITHOUT_GPU()                                                         \
  do {                                                                             \
    const CudaDevices devices = visible_cuda_devices();                            \
    if (devices.count() == 0) GTEST_SKIP() << "no CUDA device: " << devices.error; \
  } while (0)

void cuda_ok(cudaError_t status, const char* what) {
  ASSERT_EQ(status, cudaSuccess) << what << ": " << cudaGetErrorString(status);
}

// A device copy of a host array, freed at scope exit.
class DeviceArray {
 public:
  template <typename T>
  explicit DeviceArray(const std::vector<T>& host) : bytes_(host.size() * sizeof(T)) {
    cuda_ok(cudaMalloc(&data_, std::max<size_t>(bytes_, 1)), "cudaMalloc");
    if (bytes_ > 0)
      cuda_ok(cudaMemcpy(data_, host.data(), bytes_, cudaMemcpyHostToDevice), "copy in");
  }
  ~DeviceArray() { cudaFree(data_); }
  DeviceArray(const DeviceArray&) = delete;
  DeviceArray& operator=(const DeviceArray&) = delete;

  template <typename T>
  std::vector<T> to_host() const {
    std::vector<T> host(bytes_ / sizeof(T));
    EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    if (bytes_ > 0)
      cuda_ok(cudaMemcpy(host.data(), data_, bytes_, cudaMemcpyDeviceToHost), "copy out");
    return host;
  }
  TensorView view(DType dtype) const {
    return TensorView(data_, dtype, Shape{static_cast<int64_t>(bytes_ / dtype_size(dtype))},
                      Device::kCuda);
  }
  const int32_t* ints() const { return static_cast<const int32_t*>(data_); }

 private:
  void* data_ = nullptr;
  size_t bytes_;
};

enum class Layout { kCausal, kDualChunk, kPacked, kLateKeys };

struct Case {
  std::string name;
  int64_t batch, seq_q, seq_k, heads_q, heads_kv, dim;
  int32_t window;
  Layout layout;
};

// q/k positions and segments (B, S) for a layout. kDualChunk: the whole sequence in the dual
// chunk swap's order (cp = 4) as keys, rank 1's shard of it as queries (seq_q = seq_k / 4).
// kPacked: segments of random lengths, positions restarting in each. kLateKeys: keys start 9
// positions after the queries, so the first 9 query rows see no key (out 0, lse -inf).
struct Positions {
  std::vector<int32_t> q_pos, q_seg, k_pos, k_seg;
};
Positions make_positions(const Case& c, std::mt19937& rng) {
  Positions p;
  for (int64_t b = 0; b < c.batch; ++b) {
    std::vector<int32_t> pos(static_cast<size_t>(c.seq_k)), seg(static_cast<size_t>(c.seq_k));
    int32_t s = 0, next = 0;
    for (int64_t i = 0; i < c.seq_k; ++i) {
      if (c.layout == Layout::kPacked && i > 0 && rng() % 37 == 0) {
        ++s;
        next = 0;
      }
      seg[i] = s;
      pos[i] = c.layout == Layout::kPacked ? next++ : static_cast<int32_t>(i);
    }
    std::vector<int32_t> qpos, qseg;
    if (c.layout == Layout::kDualChunk) {
      const std::vector<int64_t> perm = context_permutation(c.seq_k, 4, true);
      for (int64_t i = 0; i < c.seq_k; ++i) pos[i] = static_cast<int32_t>(perm[i]);
      const int64_t shard = c.seq_k / 4;
      qpos.assign(pos.begin() + shard, pos.begin() + 2 * shard);
      qseg.assign(seg.begin() + shard, seg.begin() + 2 * shard);
    } else {
      qpos.assign(pos.begin(), pos.begin() + c.seq_q);
      qseg.assign(seg.begin(), seg.begin() + c.seq_q);
    }
    if (c.layout == Layout::kLateKeys) {
      for (int32_t& x : pos) x += 9;
    }
    p.q_pos.insert(p.q_pos.end(), qpos.begin(), qpos.end());
    p.q_seg.insert(p.q_seg.end(), qseg.begin(), qseg.end());
    p.k_pos.insert(p.k_pos.end(), pos.begin(), pos.end());
    p.k_seg.insert(p.k_seg.end(), seg.begin(), seg.end());
  }
  return p;
}

std::vector<float> random_values(size_t n, std::mt19937& rng, float scale, bool round_bf16) {
  std::normal_distribution<float> dist(0.0f, scale);
  std::vector<float> v(n);
  for (float& x : v) x = round_bf16 ? bf16_to_float(float_to_bf16(dist(rng))) : dist(rng);
  return v;
}

std::vector<bf16> to_bf16(const std::vector<float>& v) {
  std::vector<bf16> out(v.size());
  for (size_t i = 0; i < v.size(); ++i) out[i] = float_to_bf16(v[i]);
  return out;
}

// max|got - want| <= tol · max(1, max|want|); -inf must match -inf exactly.
::testing::AssertionResult close(const std::vector<float>& got, const std::vector<float>& want,
                                 double tol) {
  if (got.size() != want.size()) return ::testing::AssertionFailure() << "sizes differ";
  double scale = 1.0, worst = 0.0;
  size_t worst_at = 0;
  for (float w : want) {
    if (std::isfinite(w)) scale = std::max(scale, static_cast<double>(std::fabs(w)));
  }
  for (size_t i = 0; i < got.size(); ++i) {
    if (std::isinf(want[i]) || std::isinf(got[i])) {
      if (got[i] != want[i]) {
        return ::testing::AssertionFailure() << "at " << i << ": " << got[i] << " vs " << want[i];
      }
      continue;
    }
    const double e = std::fabs(static_cast<double>(got[i]) - want[i]);
    if (!(e <= worst)) {
      worst = e;
      worst_at = i;
    }
  }
  if (worst <= tol * scale) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure()
         << "max error " << worst << " at " << worst_at << " (got " << got[worst_at] << ", want "
         << want[worst_at] << ") exceeds " << tol << " × " << scale;
}

const std::vector<Case>& cases() {
  static const std::vector<Case> table = {
      {"causal_d64", 2, 130, 130, 2, 2, 64, 0, Layout::kCausal},
      {"causal_gqa4_d128", 1, 200, 200, 8, 2, 128, 0, Layout::kCausal},
      {"dual_chunk_gqa4", 1, 64, 256, 4, 1, 128, 0, Layout::kDualChunk},
      {"packed_segments", 2, 150, 150, 4, 2, 64, 0, Layout::kPacked},
      {"sliding_window", 1, 190, 190, 4, 1, 128, 37, Layout::kCausal},
      {"ragged_late_keys", 1, 77, 45, 3, 1, 64, 0, Layout::kLateKeys},
      {"group3_ragged", 1, 101, 99, 6, 2, 128, 0, Layout::kPacked},
  };
  return table;
}

class CudaAttentionTest : public ::testing::TestWithParam<std::tuple<size_t, bool>> {};

struct Inputs {
  AttentionParams p;
  Positions pos;
  std::vector<float> q, k, v, d_out;  // values exactly representable in the tested dtype
};

Inputs make_inputs(const Case& c, bool bf16_inputs) {
  std::mt19937 rng(static_cast<uint32_t>(std::hash<std::string>{}(c.name)));
  Inputs in;
  in.p = AttentionParams{.batch = c.batch,
                         .seq_q = c.seq_q,
                         .seq_k = c.seq_k,
                         .heads_q = c.heads_q,
                         .heads_kv = c.heads_kv,
                         .head_dim = c.dim,
                         .sliding_window = c.window};
  in.pos = make_positions(c, rng);
  const auto q_elems = static_cast<size_t>(c.batch * c.seq_q * c.heads_q * c.dim);
  const auto kv_elems = static_cast<size_t>(c.batch * c.seq_k * c.heads_kv * c.dim);
  in.q = random_values(q_elems, rng, 1.0f, bf16_inputs);
  in.k = random_values(kv_elems, rng, 1.0f, bf16_inputs);
  in.v = random_values(kv_elems, rng, 1.0f, bf16_inputs);
  in.d_out = random_values(q_elems, rng, 1.0f, bf16_inputs);
  return in;
}

DeviceArray upload(const std::vector<float>& host, bool as_bf16) {
  return as_bf16 ? DeviceArray(to_bf16(host)) : DeviceArray(host);
}

TEST_P(CudaAttentionTest, ForwardMatchesReference) {
  SKIP_WITHOUT_GPU();
  const Case& c = cases()[std::get<0>(GetParam())];
  const bool bf16_inputs = std::get<1>(GetParam());
  const Inputs in = make_inputs(c, bf16_inputs);
  std::vector<float> want_out(in.q.size()),
      want_lse(static_cast<size_t>(c.batch * c.heads_q * c.seq_q));
  ref::attention_forward<float>(want_out.data(), want_lse.data(), in.q.data(), in.k.data(),
                                in.v.data(), in.pos.q_pos.data(), in.pos.q_seg.data(),
                                in.pos.k_pos.data(), in.pos.k_seg.data(), in.p);
  const DType in_type = bf16_inputs ? DType::kBF16 : DType::kF32;
  const DeviceArray q = upload(in.q, bf16_inputs), k = upload(in.k, bf16_inputs),
                    v = upload(in.v, bf16_inputs);
  const DeviceArray qp(in.pos.q_pos), qs(in.pos.q_seg), kp(in.pos.k_pos), ks(in.pos.k_seg);
  const DeviceArray out(std::vector<float>(want_out.size(), 7.0f));
  const DeviceArray lse(std::vector<float>(want_lse.size(), 7.0f));
  AttentionStats stats;
  flash_attention_forward(out.view(DType::kF32), lse.view(DType::kF32), q.view(in_type),
                          k.view(in_type), v.view(in_type), qp.ints(), qs.ints(), kp.ints(),
                          ks.ints(), in.p, &stats, nullptr);
  EXPECT_TRUE(close(lse.to_host<float>(), want_lse, 1e-4)) << c.name << " lse";
  EXPECT_TRUE(close(out.to_host<float>(), want_out, bf16_inputs ? 1e-2 : 1e-4)) << c.name << " out";
  EXPECT_GT(stats.blocks_computed, 0);

  if (bf16_inputs) {  // a bf16 out: the same values, rounded once
    const DeviceArray out16(std::vector<bf16>(want_out.size()));
    flash_attention_forward(out16.view(DType::kBF16), lse.view(DType::kF32), q.view(in_type),
                            k.view(in_type), v.view(in_type), qp.ints(), qs.ints(), kp.ints(),
                            ks.ints(), in.p, nullptr, nullptr);
    std::vector<float> got;
    for (bf16 x : out16.to_host<bf16>()) got.push_back(bf16_to_float(x));
    EXPECT_TRUE(close(got, want_out, 1.5e-2)) << c.name << " bf16 out";
  }
}

TEST_P(CudaAttentionTest, BackwardMatchesReferenceAndIsDeterministic) {
  SKIP_WITHOUT_GPU();
  const Case& c = cases()[std::get<0>(GetParam())];
  const bool bf16_inputs = std::get<1>(GetParam());
  const Inputs in = make_inputs(c, bf16_inputs);
  std::vector<float> out(in.q.size()), lse(static_cast<size_t>(c.batch * c.heads_q * c.seq_q));
  ref::attention_forward<float>(out.data(), lse.data(), in.q.data(), in.k.data(), in.v.data(),
                                in.pos.q_pos.data(), in.pos.q_seg.data(), in.pos.k_pos.data(),
                                in.pos.k_seg.data(), in.p);
  // Accumulation: every gradient starts at 0.25, on both sides.
  std::vector<float> want_dq(in.q.size(), 0.25f), want_dk(in.k.size(), 0.25f),
      want_dv(in.v.size(), 0.25f);
  ref::attention_backward<float>(want_dq.data(), want_dk.data(), want_dv.data(), in.d_out.data(),
                                 out.data(), lse.data(), in.q.data(), in.k.data(), in.v.data(),
                                 in.pos.q_pos.data(), in.pos.q_seg.data(), in.pos.k_pos.data(),
                                 in.pos.k_seg.data(), in.p);
  const DType in_type = bf16_inputs ? DType::kBF16 : DType::kF32;
  const DeviceArray q = upload(in.q, bf16_inputs), k = upload(in.k, bf16_inputs),
                    v = upload(in.v, bf16_inputs), d_out = upload(in.d_out, bf16_inputs);
  const DeviceArray out_d(out), lse_d(lse);
  const DeviceArray qp(in.pos.q_pos), qs(in.pos.q_seg), kp(in.pos.k_pos), ks(in.pos.k_seg);
  std::vector<std::vector<float>> runs;
  for (int run = 0; run < 2; ++run) {
    const DeviceArray dq(std::vector<float>(in.q.size(), 0.25f));
    const DeviceArray dk(std::vector<float>(in.k.size(), 0.25f));
    const DeviceArray dv(std::vector<float>(in.v.size(), 0.25f));
    flash_attention_backward(dq.view(DType::kF32), dk.view(DType::kF32), dv.view(DType::kF32),
                             d_out.view(in_type), out_d.view(DType::kF32), lse_d.view(DType::kF32),
                             q.view(in_type), k.view(in_type), v.view(in_type), qp.ints(),
                             qs.ints(), kp.ints(), ks.ints(), in.p, nullptr, nullptr);
    const double tol = bf16_inputs ? 2e-2 : 1e-4;
    const std::vector<float> got_dq = dq.to_host<float>(), got_dk = dk.to_host<float>(),
                             got_dv = dv.to_host<float>();
    EXPECT_TRUE(close(got_dq, want_dq, tol)) << c.name << " dq";
    EXPECT_TRUE(close(got_dk, want_dk, tol)) << c.name << " dk";
    EXPECT_TRUE(close(got_dv, want_dv, tol)) << c.name << " dv";
    std::vector<float> all = got_dq;
    all.insert(all.end(), got_dk.begin(), got_dk.end());
    all.insert(all.end(), got_dv.begin(), got_dv.end());
    runs.push_back(std::move(all));
  }
  EXPECT_EQ(std::memcmp(runs[0].data(), runs[1].data(), runs[0].size() * sizeof(float)), 0)
      << c.name << ": two backward runs differ in their bits";
}

INSTANTIATE_TEST_SUITE_P(Cases, CudaAttentionTest,
                         ::testing::Combine(::testing::Range<size_t>(0, 7), ::testing::Bool()),
                         [](const auto& test_info) {
                           return cases()[std::get<0>(test_info.param)].name +
                                  (std::get<1>(test_info.param) ? "_bf16" : "_f32");
                         });

// Causal f32, one head, S = 256: 32 × 32 tiles, 8 × 8 of them; 36 on or below the diagonal are
// computed, 28 above it skipped (the dual chunk swap's balance rests on this skipping).
TEST(CudaAttentionStatsTest, CausalTilesAboveTheDiagonalAreSkipped) {
  SKIP_WITHOUT_GPU();
  Case c{"stats", 1, 256, 256, 1, 1, 64, 0, Layout::kCausal};
  const Inputs in = make_inputs(c, false);
  const DeviceArray q(in.q), k(in.k), v(in.v), out(in.q), lse(std::vector<float>(256));
  const DeviceArray qp(in.pos.q_pos), qs(in.pos.q_seg), kp(in.pos.k_pos), ks(in.pos.k_seg);
  AttentionStats stats;
  flash_attention_forward(out.view(DType::kF32), lse.view(DType::kF32), q.view(DType::kF32),
                          k.view(DType::kF32), v.view(DType::kF32), qp.ints(), qs.ints(), kp.ints(),
                          ks.ints(), in.p, &stats, nullptr);
  EXPECT_EQ(stats.blocks_computed, 36);
  EXPECT_EQ(stats.blocks_skipped, 28);
}

// Argument checks run before any CUDA call, so these need no GPU.
TEST(CudaAttentionArgsTest, UnsupportedHeadDimIsOneClearError) {
  AttentionParams p;
  p.seq_q = p.seq_k = 4;
  p.heads_q = p.heads_kv = 1;
  p.head_dim = 96;
  float dummy = 0;
  const TensorView t(&dummy, DType::kF32, Shape{4 * 96}, Device::kCuda);
  const TensorView l(&dummy, DType::kF32, Shape{4}, Device::kCuda);
  const int32_t* none = nullptr;
  try {
    flash_attention_forward(t, l, t, t, t, none, none, none, none, p, nullptr, nullptr);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("head_dim 96 is not supported (64 or 128)"),
              std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace maxctx::kernels::cuda

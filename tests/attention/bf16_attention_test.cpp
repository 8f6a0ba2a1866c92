// bf16 attention through the cpu op table: the flash kernel with q, k, v in bf16 (forward and
// backward) and the decode kernel on a bf16 KV cache.
//
// Oracle: ref::attention_* in double on the bf16-rounded inputs (q, k, v and d_out rounded as
// the kernel rounds them). What is left is the kernel's own rounding of P (forward and
// backward) and dS (backward) to bf16 for the products, plus fp32 sums:
//   - lse: the scores are exact bf16 products summed in fp32, the softmax is fp32; lse within
//     1e-5 · (|e| + 1), as the fp32 kernel.
//   - out: Σ_j bf16(p_j)·v_j / l with |bf16(p) − p| ≤ 2⁻⁹·p (round to nearest): the error is at
//     most 2⁻⁹·Σ p|v| / l and, the roundings being independent, about 2⁻⁹/√3 ≈ 1.1e-3 of the
//     out norm. Bar: ‖a − e‖₂ ≤ kOutRtol = 4e-3 (2⁻⁸) · ‖e‖₂ per tensor.
//   - dv (P rounded), dq and dk (dS rounded, relative 2⁻⁹ per element, no cancellation after
//     the rounding: dS is rounded once it is formed): the same 1.1e-3 per rounded operand, two
//     of them at most (P inside dS's formation is fp32). Bar: kGradRtol = 8e-3 (2⁻⁷).
// And against the unrounded fp32 inputs, the semantics: rtol 2e-2 norm-wise.
// Exact checks: a bf16 out is the f32 out rounded; an f32 d_out gives the bits of its bf16
// rounding; one thread and two give the same bits; the tile products give the bits of a scalar
// model of TDPBF16PS's roundings on AMX and on the portable path (adversarial inputs), and the
// portable path gives AMX's bits for whole attention.
#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "maxctx/core/check.h"
#include "maxctx/core/dtype.h"
#include "maxctx/core/rng.h"
#include "maxctx/core/tensor.h"
#include "maxctx/kernels/cpu/attention_tiles.h"
#include "maxctx/kernels/kernels.h"
#include "maxctx/kernels/ref/attention.h"

namespace maxctx::kernels {
namespace {

constexpr double kOutRtol = 4e-3;
constexpr double kGradRtol = 8e-3;
constexpr double kSemanticRtol = 2e-2;

const Kernels& cpu() { return backend(Device::kCpu); }

// Failed MAXCTX_CHECKs throw maxctx::Error while in scope (instead of aborting the process).
struct ScopedThrowOnError {
  ScopedThrowOnError() {
    set_check_handler([](const std::string& message) { throw Error(message); });
  }
  ~ScopedThrowOnError() { set_check_handler({}); }
};

// Positions of a case's query and key rows.
enum class Layout {
  kCausal,      // Sq == Sk, one document
  kPacked,      // documents of varying length, positions restarting
  kDualChunk0,  // cp = 2, rank 0: queries are chunks 0 and 3 of 4, keys all of them
  kDualChunk1,  // cp = 2, rank 1: chunks 1 and 2
};

struct Case {
  const char* name;
  int64_t batch, seq_q, seq_k, heads_q, heads_kv, head_dim;
  int32_t window;
  Layout layout;
};

// clang-format off
const Case kCases[] = {
  // name                    B   Sq   Sk  Hq Hkv    D  window layout
  {"gqa2_causal_d64",        1, 300, 300,  4,  2,  64,   0, Layout::kCausal},
  {"mqa_dual_chunk0_d128",   1, 256, 512,  4,  1, 128,   0, Layout::kDualChunk0},
  {"gqa2_dual_chunk1_d32",   1, 256, 512,  4,  2,  32,   0, Layout::kDualChunk1},
  {"gqa2_packed_window_d32", 2, 203, 203,  4,  2,  32,  50, Layout::kPacked},
  {"mqa_odd_window_d64",     1, 129, 129,  4,  1,  64,  40, Layout::kCausal},
  {"mha_causal_d128",        1, 160, 160,  2,  2, 128,   0, Layout::kCausal},
};
// clang-format on

AttentionParams params_of(const Case& c) {
  AttentionParams p;
  p.batch = c.batch;
  p.seq_q = c.seq_q;
  p.seq_k = c.seq_k;
  p.heads_q = c.heads_q;
  p.heads_kv = c.heads_kv;
  p.head_dim = c.head_dim;
  p.sliding_window = c.window;
  return p;
}

std::vector<float> normal(int64_t n, uint64_t seed, const char* stream) {
  std::vector<float> values(static_cast<size_t>(n));
  rng::fill_normal(values, seed, rng::stream_id(stream), 0, 0.0f, 1.0f);
  return values;
}

std::vector<bf16> to_bf16(const std::vector<float>& x) {
  std::vector<bf16> out(x.size());
  convert_f32_to_bf16(x, out);
  return out;
}
std::vector<float> to_f32(const std::vector<bf16>& x) {
  std::vector<float> out(x.size());
  convert_bf16_to_f32(x, out);
  return out;
}
std::vector<double> to_f64(const std::vector<float>& x) { return {x.begin(), x.end()}; }

TensorView view(std::vector<float>& x) {
  return TensorView(x.data(), DType::kF32, Shape{static_cast<int64_t>(x.size())});
}
TensorView view(std::vector<bf16>& x) {
  return TensorView(x.data(), DType::kBF16, Shape{static_cast<int64_t>(x.size())});
}

struct Inputs {
  std::vector<float> q, k, v, d_out;  // fp32 draws (B,Sq,Hq,D) (B,Sk,Hkv,D) ×2 (B,Sq,Hq,D)
  std::vector<bf16> q16, k16, v16, d_out16;
  std::vector<int32_t> q_pos, q_seg, k_pos, k_seg;
};

Inputs make_inputs(const Case& c) {
  const AttentionParams p = params_of(c);
  const uint64_t seed = std::hash<std::string>{}(c.name);
  Inputs in;
  in.q = normal(p.batch * p.seq_q * p.heads_q * p.head_dim, seed, "q");
  in.k = normal(p.batch * p.seq_k * p.heads_kv * p.head_dim, seed, "k");
  in.v = normal(p.batch * p.seq_k * p.heads_kv * p.head_dim, seed, "v");
  in.d_out = normal(static_cast<int64_t>(in.q.size()), seed, "d_out");
  in.q16 = to_bf16(in.q);
  in.k16 = to_bf16(in.k);
  in.v16 = to_bf16(in.v);
  in.d_out16 = to_bf16(in.d_out);
  in.q_pos.resize(static_cast<size_t>(p.batch * p.seq_q));
  in.q_seg.assign(in.q_pos.size(), 0);
  in.k_pos.resize(static_cast<size_t>(p.batch * p.seq_k));
  in.k_seg.assign(in.k_pos.size(), 0);
  for (int64_t b = 0; b < p.batch; ++b) {
    int32_t* qp = in.q_pos.data() + b * p.seq_q;
    int32_t* qs = in.q_seg.data() + b * p.seq_q;
    int32_t* kp = in.k_pos.data() + b * p.seq_k;
    int32_t* ks = in.k_seg.data() + b * p.seq_k;
    for (int64_t j = 0; j < p.seq_k; ++j) kp[j] = static_cast<int32_t>(j);
    const int64_t chunk = p.seq_k / 4;  // dual chunk layouts: 4 chunks of the keys' tokens
    for (int64_t i = 0; i < p.seq_q; ++i) {
      switch (c.layout) {
        case Layout::kCausal:
        case Layout::kPacked:
          qp[i] = static_cast<int32_t>(i);
          break;
        case Layout::kDualChunk0:
          qp[i] = static_cast<int32_t>(i < chunk ? i : 3 * chunk + (i - chunk));
          break;
        case Layout::kDualChunk1:
          qp[i] = static_cast<int32_t>(chunk + i);
          break;
      }
    }
    if (c.layout == Layout::kPacked) {  // documents of 1..70 tokens
      int32_t doc = 0, start = 0;
      for (int64_t i = 0; i < p.seq_q; ++i) {
        if (i - start >= 1 + static_cast<int64_t>(rng::u32_at(seed + b, 3, doc) % 70)) {
          ++doc;
          start = static_cast<int32_t>(i);
        }
        qp[i] = kp[i] = static_cast<int32_t>(i) - start;
        qs[i] = ks[i] = doc;
      }
    }
  }
  return in;
}

struct Result {
  std::vector<float> out, lse, dq, dk, dv;
};

// Forward then backward through the op table: q, k, v bf16, out and d_out of the given dtypes.
Result run_bf16(Inputs& in, const AttentionParams& p, DType out_dtype, DType d_out_dtype) {
  Result r;
  r.out.resize(in.q.size());
  r.lse.resize(static_cast<size_t>(p.batch * p.heads_q * p.seq_q));
  std::vector<bf16> out16(in.q.size());
  TensorView out = out_dtype == DType::kBF16 ? view(out16) : view(r.out);
  cpu().attention_forward(out, view(r.lse), view(in.q16), view(in.k16), view(in.v16),
                          in.q_pos.data(), in.q_seg.data(), in.k_pos.data(), in.k_seg.data(), p,
                          nullptr);
  if (out_dtype == DType::kBF16) r.out = to_f32(out16);
  r.dq.assign(in.q.size(), 0.0f);
  r.dk.assign(in.k.size(), 0.0f);
  r.dv.assign(in.v.size(), 0.0f);
  TensorView d_out = d_out_dtype == DType::kBF16 ? view(in.d_out16) : view(in.d_out);
  cpu().attention_backward(view(r.dq), view(r.dk), view(r.dv), d_out, out, view(r.lse),
                           view(in.q16), view(in.k16), view(in.v16), in.q_pos.data(),
                           in.q_seg.data(), in.k_pos.data(), in.k_seg.data(), p, nullptr);
  return r;
}

struct Reference {
  std::vector<double> out, lse, dq, dk, dv;
};

Reference run_reference(const std::vector<float>& q, const std::vector<float>& k,
                        const std::vector<float>& v, const std::vector<float>& d_out,
                        const Inputs& in, const AttentionParams& p) {
  Reference r;
  const auto qd = to_f64(q), kd = to_f64(k), vd = to_f64(v), dod = to_f64(d_out);
  r.out.resize(q.size());
  r.lse.resize(static_cast<size_t>(p.batch * p.heads_q * p.seq_q));
  ref::attention_forward(r.out.data(), r.lse.data(), qd.data(), kd.data(), vd.data(),
                         in.q_pos.data(), in.q_seg.data(), in.k_pos.data(), in.k_seg.data(), p);
  r.dq.assign(q.size(), 0.0);
  r.dk.assign(k.size(), 0.0);
  r.dv.assign(v.size(), 0.0);
  ref::attention_backward(r.dq.data(), r.dk.data(), r.dv.data(), dod.data(), r.out.data(),
                          r.lse.data(), qd.data(), kd.data(), vd.data(), in.q_pos.data(),
                          in.q_seg.data(), in.k_pos.data(), in.k_seg.data(), p);
  return r;
}

double relative_l2(const std::vector<float>& a, const std::vector<double>& e) {
  double diff = 0.0, norm = 0.0;
  for (size_t i = 0; i < a.size(); ++i) {
    diff += (a[i] - e[i]) * (a[i] - e[i]);
    norm += e[i] * e[i];
  }
  return std::sqrt(diff / std::max(norm, 1e-300));
}

void expect_lse_near(const std::vector<float>& a, const std::vector<double>& e) {
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::isinf(e[i])) {
      EXPECT_TRUE(std::isinf(a[i]) && a[i] < 0) << "lse " << i;
      continue;
    }
    ASSERT_NEAR(a[i], e[i], 1e-5 * (std::fabs(e[i]) + 1.0)) << "lse " << i;
  }
}

void expect_same_bits(const std::vector<float>& a, const std::vector<float>& b, const char* what) {
  ASSERT_EQ(a.size(), b.size());
  EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)), 0) << what;
}
void expect_same_bits(const Result& a, const Result& b) {
  expect_same_bits(a.out, b.out, "out");
  expect_same_bits(a.lse, b.lse, "lse");
  expect_same_bits(a.dq, b.dq, "dq");
  expect_same_bits(a.dk, b.dk, "dk");
  expect_same_bits(a.dv, b.dv, "dv");
}

class Bf16Attention : public ::testing::TestWithParam<Case> {};

TEST_P(Bf16Attention, MatchesReferenceOnRoundedInputs) {
  const Case& c = GetParam();
  const AttentionParams p = params_of(c);
  Inputs in = make_inputs(c);
  const Result got = run_bf16(in, p, DType::kF32, DType::kBF16);
  const Reference rounded =
      run_reference(to_f32(in.q16), to_f32(in.k16), to_f32(in.v16), to_f32(in.d_out16), in, p);
  expect_lse_near(got.lse, rounded.lse);
  EXPECT_LE(relative_l2(got.out, rounded.out), kOutRtol);
  EXPECT_LE(relative_l2(got.dq, rounded.dq), kGradRtol);
  EXPECT_LE(relative_l2(got.dk, rounded.dk), kGradRtol);
  EXPECT_LE(relative_l2(got.dv, rounded.dv), kGradRtol);
  // The semantics: the same attention as in fp32, to bf16's precision.
  const Reference exact = run_reference(in.q, in.k, in.v, in.d_out, in, p);
  EXPECT_LE(relative_l2(got.out, exact.out), kSemanticRtol);
  EXPECT_LE(relative_l2(got.dq, exact.dq), kSemanticRtol);
  EXPECT_LE(relative_l2(got.dk, exact.dk), kSemanticRtol);
  EXPECT_LE(relative_l2(got.dv, exact.dv), kSemanticRtol);
}

TEST_P(Bf16Attention, OutputDtypesRoundOnce) {
  const Case& c = GetParam();
  const AttentionParams p = params_of(c);
  Inputs in = make_inputs(c);
  const Result f32_out = run_bf16(in, p, DType::kF32, DType::kF32);
  const Result bf16_d_out = run_bf16(in, p, DType::kF32, DType::kBF16);
  expect_same_bits(f32_out, bf16_d_out);  // the kernel rounds an f32 d_out itself
  // A bf16 out is the f32 out rounded once (its backward then reads the rounded out).
  const Result bf16_out = run_bf16(in, p, DType::kBF16, DType::kBF16);
  EXPECT_EQ(bf16_out.out, to_f32(to_bf16(f32_out.out)));
  expect_same_bits(bf16_out.lse, f32_out.lse, "lse");
}

TEST_P(Bf16Attention, ThreadCountAndPortablePathKeepTheBits) {
  const Case& c = GetParam();
  const AttentionParams p = params_of(c);
  Inputs in = make_inputs(c);
  const int threads = omp_get_max_threads();
  omp_set_num_threads(1);
  const Result one = run_bf16(in, p, DType::kF32, DType::kBF16);
  omp_set_num_threads(2);
  const Result two = run_bf16(in, p, DType::kF32, DType::kBF16);
  omp_set_num_threads(3);
  const Result three = run_bf16(in, p, DType::kF32, DType::kBF16);
  omp_set_num_threads(threads);
  expect_same_bits(one, two);
  expect_same_bits(one, three);
  cpu::attention_bf16_force_portable(true);
  const Result portable = run_bf16(in, p, DType::kF32, DType::kBF16);
  cpu::attention_bf16_force_portable(false);
  expect_same_bits(one, portable);
}

INSTANTIATE_TEST_SUITE_P(Cases, Bf16Attention, ::testing::ValuesIn(kCases),
                         [](const auto& test_info) { return std::string(test_info.param.name); });

// ---- The tile products alone, bit for bit against a scalar model of attention_tiles.h's
// sequence (TDPBF16PS's: per chunk of 16 pairs an even and an odd lane sum of fp32 FMAs, then
// sum += even + odd; DAZ/FTZ to signed zeros). The AMX path (where the CPU has it) and the
// portable path must both give the model's bits, on adversarial inputs: cancellation, wide
// exponent ranges, products and sums in the denormal range, zeros of both signs, inf and NaN.

float flush(float x) { return std::fpclassify(x) == FP_SUBNORMAL ? std::copysign(0.0f, x) : x; }

// c (m, n) per attention_tile_gemm_bf16, from a (m, lda) and b (k, ldb) row-major.
std::vector<float> model_gemm(int64_t m, int64_t n, int64_t k, float alpha,
                              const std::vector<bf16>& a, int64_t lda, const std::vector<bf16>& b,
                              int64_t ldb, bool accumulate, std::vector<float> c, int64_t ldc) {
  const int64_t chunk = 2 * cpu::kBf16ChunkPairs;
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      float sum = 0.0f;
      for (int64_t k0 = 0; k0 < k; k0 += chunk) {
        float lane[2] = {0.0f, 0.0f};
        for (int64_t p = k0; p < k0 + chunk; ++p) {  // pad elements: +0 · +0
          const float x = p < k ? flush(bf16_to_float(a[static_cast<size_t>(i * lda + p)])) : 0.0f;
          const float y = p < k ? flush(bf16_to_float(b[static_cast<size_t>(p * ldb + j)])) : 0.0f;
          lane[p % 2] = flush(std::fma(x, y, lane[p % 2]));
        }
        sum = flush(sum + flush(lane[0] + lane[1]));
      }
      float& out = c[static_cast<size_t>(i * ldc + j)];
      out = accumulate ? std::fma(alpha, sum, out) : alpha * sum;
    }
  }
  return c;
}

// bf16 with the exponent drawn per kind: 0 normal (±4 binades), 1 wide (±40), 2 any finite,
// 3 near and below 2⁻¹²⁶ (denormal bf16 included), 4 products near 2⁻¹²⁶; 1 in 16 a signed zero.
std::vector<bf16> adversarial(int64_t count, int kind, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<bf16> out(static_cast<size_t>(count));
  for (bf16& x : out) {
    const uint32_t r = static_cast<uint32_t>(rng());
    int e = 0;
    switch (kind) {
      case 0:
        e = 127 + static_cast<int>(r % 9) - 4;
        break;
      case 1:
        e = 127 + static_cast<int>(r % 81) - 40;
        break;
      case 2:
        e = 1 + static_cast<int>(r % 254);
        break;
      case 3:
        e = static_cast<int>(r % 12);
        break;
      default:
        e = 58 + static_cast<int>(r % 10);
        break;
    }
    uint16_t bits = static_cast<uint16_t>(((r >> 8) & 1u) << 15 | e << 7 | ((r >> 9) & 0x7fu));
    if ((r >> 24) % 16 == 0) bits = static_cast<uint16_t>((r >> 20 & 1u) << 15);
    x.bits = bits;
  }
  return out;
}

void expect_model_bits(int64_t m, int64_t n, int64_t k, int kind, bool accumulate) {
  const int64_t lda = k + (k % 2 == 0 ? 2 : 3), ldb = n + 3, ldc = n + 1;
  const auto seed = static_cast<uint64_t>(m * 131 + n * 17 + k * 7 + kind);
  std::vector<bf16> a = adversarial(m * lda, kind, seed), b = adversarial(k * ldb, kind, seed + 1);
  if (kind == 0) {  // pairs that cancel: a[2p+1]·b[2p+1] = -a[2p]·b[2p]
    for (int64_t i = 0; i < m; ++i) {
      for (int64_t p = 0; p + 1 < k; p += 2) {
        a[static_cast<size_t>(i * lda + p + 1)] =
            float_to_bf16(-bf16_to_float(a[static_cast<size_t>(i * lda + p)]));
      }
    }
    for (int64_t p = 0; p + 1 < k; p += 2) {
      for (int64_t j = 0; j < n; ++j)
        b[static_cast<size_t>((p + 1) * ldb + j)] = b[static_cast<size_t>(p * ldb + j)];
    }
  }
  if (kind == 2) {  // a few inf
    a[1] = float_to_bf16(std::numeric_limits<float>::infinity());
    b[2] = float_to_bf16(-std::numeric_limits<float>::infinity());
  }
  std::vector<float> c0 = normal(m * ldc, seed, "c");
  if (kind == 3) {
    for (float& x : c0) x *= 1e-37f;
  }
  const std::vector<float> want = model_gemm(m, n, k, 0.75f, a, lda, b, ldb, accumulate, c0, ldc);
  for (const bool portable : {false, true}) {
    if (!portable && !cpu::attention_bf16_amx()) continue;
    for (const bool packed : {false, true}) {
      std::vector<uint32_t> b_packed;
      if (packed) {  // B = srcᵀ with src (n, k)
        std::vector<bf16> src(static_cast<size_t>(n * k));
        for (int64_t p = 0; p < k; ++p) {
          for (int64_t j = 0; j < n; ++j)
            src[static_cast<size_t>(j * k + p)] = b[static_cast<size_t>(p * ldb + j)];
        }
        b_packed.resize(static_cast<size_t>(cpu::attention_bf16_packed_words(k, n)));
        cpu::attention_pack_bf16_transposed(b_packed.data(), src.data(), n, k, k);
      }
      std::vector<float> got = c0;
      cpu::attention_bf16_force_portable(portable);
      cpu::attention_tile_gemm_bf16(m, n, k, 0.75f, a.data(), lda, b.data(), ldb,
                                    packed ? b_packed.data() : nullptr, accumulate, got.data(),
                                    ldc);
      cpu::attention_bf16_force_portable(false);
      for (size_t i = 0; i < got.size(); ++i) {
        const bool both_nan = std::isnan(got[i]) && std::isnan(want[i]);
        ASSERT_TRUE(both_nan || std::memcmp(&got[i], &want[i], sizeof(float)) == 0)
            << (portable ? "portable" : "amx") << (packed ? " packed" : "") << " m " << m << " n "
            << n << " k " << k << " kind " << kind << " accumulate " << accumulate << " at " << i
            << ": " << got[i] << " (" << std::hexfloat << got[i] << ") want " << want[i];
      }
    }
  }
}

TEST(Bf16TileGemm, AmxAndPortableGiveTheModelsBits) {
  struct Shape {
    int64_t m, n, k;
  };
  const Shape shapes[] = {{32, 32, 64}, {37, 45, 77}, {13, 16, 1}, {16, 33, 32}, {48, 17, 100}};
  for (const Shape& s : shapes) {
    for (int kind = 0; kind < 5; ++kind) {
      for (const bool accumulate : {false, true})
        expect_model_bits(s.m, s.n, s.k, kind, accumulate);
    }
  }
}

// The product is the dot product up to fp32 sums: within a few roundings of the double sum.
TEST(Bf16TileGemm, CloseToTheDoubleProduct) {
  const int64_t m = 13, n = 45, k = 37, lda = 38, ldb = 50, ldc = 47;
  const std::vector<bf16> a = to_bf16(normal(m * lda, 11, "a")),
                          b = to_bf16(normal(k * ldb, 11, "b"));
  std::vector<float> c(static_cast<size_t>(m * ldc));
  cpu::attention_tile_gemm_bf16(m, n, k, 0.75f, a.data(), lda, b.data(), ldb, nullptr, false,
                                c.data(), ldc);
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      double sum = 0.0, size = 0.0;
      for (int64_t p = 0; p < k; ++p) {
        const double x = bf16_to_float(a[static_cast<size_t>(i * lda + p)]) *
                         static_cast<double>(bf16_to_float(b[static_cast<size_t>(p * ldb + j)]));
        sum += x;
        size += std::fabs(x);
      }
      EXPECT_NEAR(c[static_cast<size_t>(i * ldc + j)], 0.75 * sum, 1e-5 * (size + 1.0));
    }
  }
}

TEST(Bf16Attention, RejectsBadDtypes) {
  const ScopedThrowOnError throw_on_error;
  const Case& c = kCases[0];
  const AttentionParams p = params_of(c);
  Inputs in = make_inputs(c);
  std::vector<float> out(in.q.size()), lse(static_cast<size_t>(p.heads_q * p.seq_q));
  std::vector<int8_t> q8(in.q.size());
  const TensorView q_int8(q8.data(), DType::kI8, Shape{static_cast<int64_t>(q8.size())});
  auto forward = [&](TensorView o, TensorView l, TensorView q, TensorView k) {
    cpu().attention_forward(o, l, q, k, view(in.v16), in.q_pos.data(), in.q_seg.data(),
                            in.k_pos.data(), in.k_seg.data(), p, nullptr);
  };
  EXPECT_THROW(forward(view(out), view(lse), q_int8, view(in.k16)), Error);
  EXPECT_THROW(forward(view(out), view(lse), view(in.q16), view(in.k)), Error);  // mixed q, k
  std::vector<bf16> lse16(lse.size());
  EXPECT_THROW(forward(view(out), view(lse16), view(in.q16), view(in.k16)), Error);  // lse f32
  std::vector<bf16> dq16(in.q.size());
  std::vector<float> dk(in.k.size()), dv(in.v.size());
  EXPECT_THROW(
      cpu().attention_backward(view(dq16), view(dk), view(dv), view(in.d_out16), view(out),
                               view(lse), view(in.q16), view(in.k16), view(in.v16), in.q_pos.data(),
                               in.q_seg.data(), in.k_pos.data(), in.k_seg.data(), p, nullptr),
      Error);  // dq must be f32
  try {
    forward(view(out), view(lse), q_int8, view(in.k16));
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("attention_forward"), std::string::npos) << e.what();
  }
}

// ---------------------------------------------------------------- decode on a bf16 cache

struct DecodeCase {
  int64_t batch, seq_k, heads_q, heads_kv, head_dim;
  int32_t window;
};

TEST(Bf16SingleQueryAttention, BitsOfTheWidenedCache) {
  for (const DecodeCase& c : {DecodeCase{2, 300, 4, 2, 64, 0}, DecodeCase{1, 517, 4, 1, 128, 0},
                              DecodeCase{3, 200, 8, 8, 32, 50}, DecodeCase{1, 129, 4, 4, 40, 0}}) {
    AttentionParams p;
    p.batch = c.batch;
    p.seq_q = 1;
    p.seq_k = c.seq_k;
    p.heads_q = c.heads_q;
    p.heads_kv = c.heads_kv;
    p.head_dim = c.head_dim;
    p.sliding_window = c.window;
    const int64_t kv_numel = c.batch * c.seq_k * c.heads_kv * c.head_dim;
    const uint64_t seed = static_cast<uint64_t>(c.seq_k * 7 + c.head_dim);
    std::vector<float> q = normal(c.batch * c.heads_q * c.head_dim, seed, "q");
    std::vector<bf16> k16 = to_bf16(normal(kv_numel, seed, "k")),
                      v16 = to_bf16(normal(kv_numel, seed, "v")), q16 = to_bf16(q);
    std::vector<float> k = to_f32(k16), v = to_f32(v16);
    std::vector<int32_t> q_pos(c.batch), q_seg(c.batch, 0), k_pos(c.batch * c.seq_k),
        k_seg(k_pos.size(), 0);
    for (int64_t b = 0; b < c.batch; ++b) {
      q_pos[b] = static_cast<int32_t>(c.seq_k - 1 - 3 * b);  // later rows hidden for b > 0
      for (int64_t j = 0; j < c.seq_k; ++j) k_pos[b * c.seq_k + j] = static_cast<int32_t>(j);
    }
    auto run = [&](TensorView out, TensorView qv, TensorView kv, TensorView vv) {
      std::vector<float> lse(static_cast<size_t>(c.batch * c.heads_q));
      cpu().single_query_attention(out, view(lse), qv, kv, vv, q_pos.data(), q_seg.data(),
                                   k_pos.data(), k_seg.data(), p);
      return lse;
    };
    std::vector<float> out_f32(q.size()), out_bf16_cache(q.size());
    const auto lse_f32 = run(view(out_f32), view(q), view(k), view(v));
    const auto lse_bf16 = run(view(out_bf16_cache), view(q), view(k16), view(v16));
    expect_same_bits(out_f32, out_bf16_cache, "decode out");
    expect_same_bits(lse_f32, lse_bf16, "decode lse");
    // bf16 q and out: the f32 kernel on the widened q, rounded once.
    std::vector<bf16> out16(q.size());
    std::vector<float> q_widened = to_f32(q16), out_widened(q.size());
    run(view(out16), view(q16), view(k16), view(v16));
    run(view(out_widened), view(q_widened), view(k16), view(v16));
    EXPECT_EQ(to_f32(out16), to_f32(to_bf16(out_widened)));
    // Against the double reference on the widened cache.
    std::vector<double> out_ref(q.size()), lse_ref(lse_f32.size());
    const auto qd = to_f64(q), kd = to_f64(k), vd = to_f64(v);
    ref::attention_forward(out_ref.data(), lse_ref.data(), qd.data(), kd.data(), vd.data(),
                           q_pos.data(), q_seg.data(), k_pos.data(), k_seg.data(), p);
    EXPECT_LE(relative_l2(out_bf16_cache, out_ref), 1e-5);
    expect_lse_near(lse_bf16, lse_ref);
    // A mixed cache is refused.
    const ScopedThrowOnError throw_on_error;
    EXPECT_THROW(run(view(out_f32), view(q), view(k16), view(v)), Error);
  }
}

}  // namespace
}  // namespace maxctx::kernels

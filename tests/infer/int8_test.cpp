// The int8 kernels against the reference (kernels/ref/int8.h): the quantization rule itself
// (rounding, the ±127 clamp of the 127.5 KV rule, zero rows, the half-code error bound) and the
// int8 matmul, whose int32 sums are exact, so the cpu kernel must match the reference bit for
// bit on a table of shapes (tokens 1..9 to hit every tile tail, in_dim not a multiple of 4,
// out_dim not a multiple of 16), through the VNNI path and the portable one.
#include "maxctx/kernels/cpu/int8.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "maxctx/core/rng.h"
#include "maxctx/kernels/ref/int8.h"

namespace maxctx::kernels {
namespace {

std::vector<float> normal(int64_t n, uint64_t stream) {
  std::vector<float> x(static_cast<size_t>(n));
  rng::fill_normal(x, 17, stream, 0, 0.0f, 1.0f);
  return x;
}

TEST(Int8Quantize, RuleRoundsClampsAndKeepsHalfACode) {
  // 127.5 levels with max|x| = 127.5, so x·127.5/max = x exactly: the maxima land on ±127.5,
  // which rint takes to ±128 and the clamp keeps at ±127; halves round to even.
  const std::vector<float> x = {127.5f, -127.5f, 63.5f, 0.5f, 1.5f, 0.0f};
  std::vector<int8_t> q(x.size());
  const float scale = ref::quantize_row_int8(q.data(), x.data(), 6, kInt8KvLevels);
  EXPECT_EQ(scale, 1.0f);
  EXPECT_EQ(q, (std::vector<int8_t>{127, -127, 64, 0, 2, 0}));
  // 127 levels: the maxima map to ±127 exactly, no clamp needed.
  const float s127 = ref::quantize_row_int8(q.data(), x.data(), 6, kInt8Levels);
  EXPECT_EQ(s127, 127.5f / 127.0f);
  EXPECT_EQ(q[0], 127);
  EXPECT_EQ(q[1], -127);

  const std::vector<float> zeros(7, 0.0f);
  std::vector<int8_t> qz(7, 5);
  EXPECT_EQ(ref::quantize_row_int8(qz.data(), zeros.data(), 7, kInt8KvLevels), 0.0f);
  for (int8_t v : qz) EXPECT_EQ(v, 0);
}

TEST(Int8Quantize, CpuRowsEqualReferenceAndErrorIsAtMostHalfAScale) {
  const int64_t rows = 37, cols = 48;
  const std::vector<float> x = normal(rows * cols, 1);
  std::vector<int8_t> q_ref(x.size()), q_cpu(x.size());
  std::vector<float> s_ref(rows), s_cpu(rows), back(x.size());
  ref::quantize_rows_int8(q_ref.data(), s_ref.data(), x.data(), rows, cols, kInt8KvLevels);
  cpu::quantize_rows_int8(q_cpu.data(), s_cpu.data(), x.data(), rows, cols, kInt8KvLevels);
  EXPECT_EQ(q_cpu, q_ref);
  EXPECT_EQ(s_cpu, s_ref);
  cpu::dequantize_rows_int8(back.data(), q_cpu.data(), s_cpu.data(), rows, cols);
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t i = 0; i < cols; ++i) {
      // Half a code everywhere, the clamped maximum included (127.5 − 127 = 0.5), plus the
      // float rounding of the products (a few ulps of max|x| = 127.5·scale).
      const float bound = 0.5f * s_cpu[r] + 1e-6f * 127.5f * s_cpu[r];
      EXPECT_LE(std::fabs(back[r * cols + i] - x[r * cols + i]), bound);
    }
  }
}

struct MatmulCase {
  int64_t N, in_dim, out_dim;
};

const MatmulCase kMatmulCases[] = {{1, 64, 16},  {1, 65, 17},  {2, 3, 1},
                                   {3, 130, 40}, {4, 256, 64}, {5, 257, 70},
                                   {7, 96, 257}, {9, 33, 129}, {130, 48, 80}};

TEST(Int8Matmul, CpuEqualsReferenceBitForBit) {
  for (const MatmulCase& c : kMatmulCases) {
    SCOPED_TRACE(::testing::Message() << "N=" << c.N << " in=" << c.in_dim << " out=" << c.out_dim);
    const std::vector<float> x = normal(c.N * c.in_dim, 2);
    const std::vector<float> w = normal(c.out_dim * c.in_dim, 3);
    std::vector<int8_t> wq(w.size());
    std::vector<float> ws(static_cast<size_t>(c.out_dim));
    ref::quantize_rows_int8(wq.data(), ws.data(), w.data(), c.out_dim, c.in_dim, kInt8Levels);
    std::vector<float> want(static_cast<size_t>(c.N * c.out_dim));
    ref::int8_matmul_forward(want.data(), x.data(), wq.data(), ws.data(), c.N, c.in_dim, c.out_dim);

    const cpu::Int8Weights packed = cpu::int8_pack_weights(w.data(), c.out_dim, c.in_dim);
    EXPECT_EQ(packed.scale, ws);
    cpu::Int8Rows rows;
    cpu::int8_quantize_rows(rows, x.data(), c.N, c.in_dim);
    for (cpu::Int8Path path : {cpu::Int8Path::kBest, cpu::Int8Path::kPortable}) {
      std::vector<float> got(want.size(), -1.0f);
      cpu::int8_matmul_forward(got.data(), rows, packed, path);
      EXPECT_EQ(got, want) << (path == cpu::Int8Path::kBest ? "best" : "portable");
    }
  }
}

// The quantized product stays close to the fp32 one: per-channel int8 on N(0,1) data keeps the
// relative error of a 256-long dot product near 1% (measured 0.4–0.6% norm-relative here).
TEST(Int8Matmul, CloseToFloat) {
  const int64_t N = 8, in_dim = 256, out_dim = 96;
  const std::vector<float> x = normal(N * in_dim, 4);
  const std::vector<float> w = normal(out_dim * in_dim, 5);
  const cpu::Int8Weights packed = cpu::int8_pack_weights(w.data(), out_dim, in_dim);
  cpu::Int8Rows rows;
  cpu::int8_quantize_rows(rows, x.data(), N, in_dim);
  std::vector<float> got(static_cast<size_t>(N * out_dim));
  cpu::int8_matmul_forward(got.data(), rows, packed);
  double diff = 0.0, scale = 0.0;
  for (int64_t n = 0; n < N; ++n) {
    for (int64_t o = 0; o < out_dim; ++o) {
      double exact = 0.0;
      for (int64_t i = 0; i < in_dim; ++i) exact += double(x[n * in_dim + i]) * w[o * in_dim + i];
      diff = std::max(diff, std::fabs(got[n * out_dim + o] - exact));
      scale = std::max(scale, std::fabs(exact));
    }
  }
  EXPECT_LE(diff / scale, 0.02);
}

}  // namespace
}  // namespace maxctx::kernels

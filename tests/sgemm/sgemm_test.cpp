// sgemm against a plain double-precision loop: one table of shapes (tiles, tails, sizes past
// every cache block, tiny ones) run with all four transposes, padded leading dimensions, beta 0
// and 1 and another, on every Highway target this CPU runs. Then the BLAS corner cases (beta 0
// ignores NaN in C, alpha 0, K 0, empty C) and thread-count determinism.
//
// Accuracy: ‖got − want‖₂ ≤ 1e-5 · ‖want‖₂ per row of C, the GEMM metric of kernels/README.md.
// Columns of C past n (the leading-dimension padding) must be left untouched.
#include <gtest/gtest.h>
#include <omp.h>

// As in sgemm.cpp, so that this file sees the same list of compiled targets.
#ifndef HWY_WANT_AVX3_DL
#define HWY_WANT_AVX3_DL
#endif
#include <cmath>
#include <cstdint>
#include <limits>
#include <stdexcept>
#include <string>
#include <vector>

#include "hwy/targets.h"
#include "maxctx/core/check.h"
#include "maxctx/core/rng.h"
#include "maxctx/kernels/cpu/sgemm.h"

namespace maxctx::kernels::cpu {
namespace {

constexpr double kTolerance = 1e-5;

std::vector<float> normal(int64_t n, const std::string& stream) {
  std::vector<float> x(static_cast<size_t>(n));
  rng::fill_normal(x, 20261202, rng::stream_id(stream), 0, 0.0f, 1.0f);
  return x;
}

// One product with its operands stored as sgemm reads them, leading dimensions padded.
struct Problem {
  Problem(Transpose ta, Transpose tb, int64_t m_, int64_t n_, int64_t k_, const std::string& name)
      : trans_a(ta), trans_b(tb), m(m_), n(n_), k(k_) {
    const bool a_t = ta == Transpose::kYes;
    const bool b_t = tb == Transpose::kYes;
    lda = (a_t ? m : k) + 3;
    ldb = (b_t ? k : n) + 5;
    ldc = n + 7;
    a = normal(lda * (a_t ? k : m), name + "/a");
    b = normal(ldb * (b_t ? n : k), name + "/b");
    c = normal(ldc * m, name + "/c");
  }
  double a_at(int64_t i, int64_t p) const {
    return trans_a == Transpose::kYes ? a[p * lda + i] : a[i * lda + p];
  }
  double b_at(int64_t p, int64_t j) const {
    return trans_b == Transpose::kYes ? b[j * ldb + p] : b[p * ldb + j];
  }
  // alpha · op(A) · op(B) + beta · C0 in double, all ldc columns (padding copied from C0).
  std::vector<double> reference(float alpha, float beta) const {
    std::vector<double> want(c.begin(), c.end());
    for (int64_t i = 0; i < m; ++i) {
      for (int64_t j = 0; j < n; ++j) {
        double sum = 0;
        for (int64_t p = 0; p < k; ++p) sum += a_at(i, p) * b_at(p, j);
        const double old = beta == 0.0f ? 0.0 : double{beta} * c[i * ldc + j];
        want[i * ldc + j] = double{alpha} * sum + old;
      }
    }
    return want;
  }
  std::vector<float> run(float alpha, float beta) const {
    std::vector<float> out = c;
    sgemm(trans_a, trans_b, m, n, k, alpha, a.data(), lda, b.data(), ldb, beta, out.data(), ldc);
    return out;
  }
  Transpose trans_a, trans_b;
  int64_t m, n, k, lda = 0, ldb = 0, ldc = 0;
  std::vector<float> a, b, c;
};

::testing::AssertionResult matches(const Problem& p, const std::vector<float>& got,
                                   const std::vector<double>& want) {
  for (int64_t i = 0; i < p.m; ++i) {
    double err = 0, norm = 0;
    for (int64_t j = 0; j < p.n; ++j) {
      const double diff = got[i * p.ldc + j] - want[i * p.ldc + j];
      err += diff * diff;
      norm += want[i * p.ldc + j] * want[i * p.ldc + j];
    }
    if (!(std::sqrt(err) <= kTolerance * std::sqrt(norm))) {
      return ::testing::AssertionFailure() << "row " << i << ": |got - want| = " << std::sqrt(err)
                                           << ", |want| = " << std::sqrt(norm);
    }
    for (int64_t j = p.n; j < p.ldc; ++j) {
      if (got[i * p.ldc + j] != p.c[i * p.ldc + j]) {
        return ::testing::AssertionFailure()
               << "row " << i << " padding column " << j << " was written";
      }
    }
  }
  return ::testing::AssertionSuccess();
}

struct Shape {
  int64_t m, n, k;
  const char* why;
};

// Tile sizes: 8 or 6 rows × 32 or 16 columns; blocks: K 256, M 160 or 120, N 4096.
const Shape kShapes[] = {
    {1, 1, 1, "one element"},
    {1, 7, 3, "one row, a column tail"},
    {7, 1, 5, "one column, a row tail"},
    {3, 2, 1, "K of one"},
    {8, 32, 16, "one whole AVX-512 tile"},
    {13, 37, 29, "tails in every dimension"},
    {48, 96, 80, "whole tiles, several of them"},
    {64, 64, 64, "whole tiles on AVX-512, tails on AVX2 (6 rows)"},
    {33, 65, 600, "K past two K blocks, with a tail"},
    {333, 70, 300, "M past two M blocks"},
    {9, 4133, 17, "N past the N block"},
    {130, 250, 257, "every dimension just past a block or tile"},
    {513, 96, 1100, "several blocks of M and K"},
};

class SgemmTable : public ::testing::TestWithParam<int64_t> {  // param: Highway target bit
 protected:
  void SetUp() override { hwy::SetSupportedTargetsForTest(GetParam()); }
  void TearDown() override { hwy::SetSupportedTargetsForTest(0); }
};

TEST_P(SgemmTable, MatchesDoubleLoopForEveryShapeAndTranspose) {
  ASSERT_STREQ(sgemm_simd_target(), hwy::TargetName(GetParam()));
  const struct { float alpha, beta; } kScalars[] = {{1.0f, 0.0f}, {1.0f, 1.0f}, {-0.75f, 0.5f}};
  for (const Shape& s : kShapes) {
    for (const Transpose ta : {Transpose::kNo, Transpose::kYes}) {
      for (const Transpose tb : {Transpose::kNo, Transpose::kYes}) {
        const std::string name = std::to_string(s.m) + "x" + std::to_string(s.n) + "x" +
                                 std::to_string(s.k) + (ta == Transpose::kYes ? " T" : " N") +
                                 (tb == Transpose::kYes ? "T" : "N");
        const Problem p(ta, tb, s.m, s.n, s.k, name);
        for (const auto& sc : kScalars) {
          EXPECT_TRUE(matches(p, p.run(sc.alpha, sc.beta), p.reference(sc.alpha, sc.beta)))
              << name << " (" << s.why << "), alpha " << sc.alpha << ", beta " << sc.beta;
        }
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Targets, SgemmTable,
                         ::testing::ValuesIn(hwy::SupportedAndGeneratedTargets()),
                         [](const ::testing::TestParamInfo<int64_t>& target) {
                           return std::string(hwy::TargetName(target.param));
                         });

TEST(Sgemm, BetaZeroDoesNotReadC) {
  Problem p(Transpose::kNo, Transpose::kYes, 21, 45, 300, "beta0");
  const std::vector<double> want = p.reference(1.0f, 0.0f);
  for (int64_t i = 0; i < p.m; ++i) {
    for (int64_t j = 0; j < p.n; ++j) p.c[i * p.ldc + j] = std::numeric_limits<float>::quiet_NaN();
  }
  EXPECT_TRUE(matches(p, p.run(1.0f, 0.0f), want));
}

TEST(Sgemm, AccumulatesOverRepeatedCalls) {
  // C += A·B twice equals C0 + 2·A·B: beta 1 is the d_weight accumulation.
  Problem p(Transpose::kYes, Transpose::kNo, 40, 70, 520, "accumulate");
  std::vector<float> out = p.c;
  for (int r = 0; r < 2; ++r) {
    sgemm(p.trans_a, p.trans_b, p.m, p.n, p.k, 1.0f, p.a.data(), p.lda, p.b.data(), p.ldb, 1.0f,
          out.data(), p.ldc);
  }
  EXPECT_TRUE(matches(p, out, p.reference(2.0f, 1.0f)));
}

TEST(Sgemm, AlphaZeroAndEmptyKOnlyScaleC) {
  for (const int64_t k : {int64_t{0}, int64_t{9}}) {
    Problem p(Transpose::kNo, Transpose::kNo, 5, 11, k, "scale");
    const float alpha = k == 0 ? 1.0f : 0.0f;
    if (k > 0) p.a[0] = std::numeric_limits<float>::quiet_NaN();  // alpha 0 must not read A
    for (const float beta : {0.0f, 0.5f}) {
      const std::vector<float> got = p.run(alpha, beta);
      for (int64_t i = 0; i < p.m; ++i) {
        for (int64_t j = 0; j < p.ldc; ++j) {
          const float c0 = p.c[i * p.ldc + j];
          EXPECT_EQ(got[i * p.ldc + j], j < p.n ? beta * c0 : c0) << "k " << k << " beta " << beta;
        }
      }
    }
  }
}

TEST(Sgemm, EmptyCIsLeftAlone) {
  float c = 3.0f;
  const float a = 1.0f, b = 1.0f;
  sgemm(Transpose::kNo, Transpose::kNo, 0, 1, 1, 1.0f, &a, 1, &b, 1, 0.0f, &c, 1);
  sgemm(Transpose::kNo, Transpose::kNo, 1, 0, 1, 1.0f, &a, 1, &b, 1, 0.0f, &c, 1);
  EXPECT_EQ(c, 3.0f);
}

TEST(Sgemm, RejectsBadSizesAndLeadingDimensions) {
  set_check_handler([](const std::string& message) { throw std::runtime_error(message); });
  std::vector<float> x(64);
  EXPECT_THROW(sgemm(Transpose::kNo, Transpose::kNo, 4, 4, 4, 1.0f, x.data(), 3, x.data(), 4, 0.0f,
                     x.data(), 4),
               std::runtime_error);
  EXPECT_THROW(sgemm(Transpose::kNo, Transpose::kYes, 4, 4, 4, 1.0f, x.data(), 4, x.data(), 3, 0.0f,
                     x.data(), 4),
               std::runtime_error);
  EXPECT_THROW(sgemm(Transpose::kNo, Transpose::kNo, 4, 4, -1, 1.0f, x.data(), 4, x.data(), 4, 0.0f,
                     x.data(), 4),
               std::runtime_error);
  set_check_handler({});
}

// Threads split C, never K: 1 and 2 threads give the same bits, run after run. The shapes are
// large enough for sgemm to fork (M split into blocks; tiny M split over N instead).
TEST(Sgemm, BitIdenticalAcrossThreadCountsAndRuns) {
  const int saved = omp_get_max_threads();
  for (const Shape& s : {Shape{700, 300, 600, "M blocks"}, Shape{5, 3000, 900, "N split"}}) {
    for (const Transpose ta : {Transpose::kNo, Transpose::kYes}) {
      const Problem p(ta, Transpose::kYes, s.m, s.n, s.k, std::string("threads/") + s.why);
      omp_set_num_threads(1);
      const std::vector<float> one = p.run(1.0f, 1.0f);
      omp_set_num_threads(2);
      for (int run = 0; run < 3; ++run) {
        EXPECT_EQ(p.run(1.0f, 1.0f), one) << s.why << ", run " << run;
      }
    }
  }
  omp_set_num_threads(saved);
}

}  // namespace
}  // namespace maxctx::kernels::cpu

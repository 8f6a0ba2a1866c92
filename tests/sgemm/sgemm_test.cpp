// The project's SGEMM against a plain double-precision loop: a table of shapes (tails, tiny,
// larger than one cache block) × the four transpose combinations × beta 0 / 1, norm-relative
// per row (‖c − ref‖₂ ≤ 1e-5·‖ref‖₂ per row of C), plus bit-identical results for 1 and 2 threads.
#include "maxctx/kernels/cpu/sgemm.h"

#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <vector>

#include "maxctx/core/rng.h"

namespace maxctx::kernels::cpu {
namespace {

struct Shape {
  int64_t m, n, k;
};

std::vector<float> random_matrix(int64_t size, uint64_t stream) {
  std::vector<float> x(size);
  rng::fill_normal(x, 17, stream, 0, 0.0f, 1.0f);
  return x;
}

void reference(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha,
               const std::vector<float>& a, int64_t lda, const std::vector<float>& b, int64_t ldb,
               float beta, std::vector<double>& c, int64_t ldc) {
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      double sum = 0.0;
      for (int64_t p = 0; p < k; ++p) {
        const double x = ta ? a[p * lda + i] : a[i * lda + p];
        const double y = tb ? b[j * ldb + p] : b[p * ldb + j];
        sum += x * y;
      }
      c[i * ldc + j] = alpha * sum + beta * c[i * ldc + j];
    }
  }
}

class SgemmTable : public ::testing::TestWithParam<Shape> {};

TEST_P(SgemmTable, MatchesDoubleLoop) {
  const Shape s = GetParam();
  for (bool ta : {false, true}) {
    for (bool tb : {false, true}) {
      for (float beta : {0.0f, 1.0f}) {
        const int64_t lda = (ta ? s.m : s.k) + 3;  // padded leading dimensions
        const int64_t ldb = (tb ? s.k : s.n) + 1;
        const int64_t ldc = s.n + 2;
        const auto a = random_matrix((ta ? s.k : s.m) * lda, 1);
        const auto b = random_matrix((tb ? s.n : s.k) * ldb, 2);
        std::vector<float> c = random_matrix(s.m * ldc, 3);
        std::vector<double> expected(c.begin(), c.end());
        reference(ta, tb, s.m, s.n, s.k, 0.5f, a, lda, b, ldb, beta, expected, ldc);
        sgemm(ta ? Transpose::kYes : Transpose::kNo, tb ? Transpose::kYes : Transpose::kNo, s.m,
              s.n, s.k, 0.5f, a.data(), lda, b.data(), ldb, beta, c.data(), ldc);
        for (int64_t i = 0; i < s.m; ++i) {
          double diff = 0.0, norm = 0.0;
          for (int64_t j = 0; j < s.n; ++j) {
            diff += std::pow(c[i * ldc + j] - expected[i * ldc + j], 2);
            norm += std::pow(expected[i * ldc + j], 2);
          }
          ASSERT_LE(std::sqrt(diff), 1e-5 * std::sqrt(norm) + 1e-30)
              << "row " << i << " ta " << ta << " tb " << tb << " beta " << beta;
        }
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Shapes, SgemmTable,
                         ::testing::Values(Shape{1, 1, 1}, Shape{3, 5, 7}, Shape{17, 33, 9},
                                           Shape{64, 64, 64}, Shape{129, 47, 300},
                                           Shape{200, 517, 130}, Shape{513, 96, 1100},
                                           Shape{31, 1030, 77}));

TEST(Sgemm, SameBitsOnOneAndTwoThreads) {
  const int64_t m = 300, n = 260, k = 520;
  const auto a = random_matrix(m * k, 4);
  const auto b = random_matrix(k * n, 5);
  std::vector<float> one(m * n), two(m * n);
  const int saved = omp_get_max_threads();
  omp_set_num_threads(1);
  sgemm(Transpose::kNo, Transpose::kNo, m, n, k, 1.0f, a.data(), k, b.data(), n, 0.0f, one.data(),
        n);
  omp_set_num_threads(2);
  sgemm(Transpose::kNo, Transpose::kNo, m, n, k, 1.0f, a.data(), k, b.data(), n, 0.0f, two.data(),
        n);
  omp_set_num_threads(saved);
  EXPECT_EQ(one, two);
}

TEST(Sgemm, AlphaZeroOnlyScalesC) {
  std::vector<float> a(4, 1.0f), b(4, 1.0f), c = {1.0f, 2.0f, 3.0f, 4.0f};
  sgemm(Transpose::kNo, Transpose::kNo, 2, 2, 2, 0.0f, a.data(), 2, b.data(), 2, 2.0f, c.data(), 2);
  EXPECT_EQ(c, (std::vector<float>{2.0f, 4.0f, 6.0f, 8.0f}));
}

}  // namespace
}  // namespace maxctx::kernels::cpu

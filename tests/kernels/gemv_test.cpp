// The matrix-vector path of matmul_forward (kernels/cpu/gemv.h) on every Highway target this
// CPU runs, against the double reference (1e-5 of the row's |w|·|x| sum), and the property the
// row split of sequence-sharded decode relies on: the rows [begin, end) of a matrix, passed as
// their own matrix, give the same bits as those rows of the whole product, whatever the offset.
#include "maxctx/kernels/cpu/gemv.h"

#include <gtest/gtest.h>

// As in gemv.cpp, so that this file sees the same list of compiled targets.
#ifndef HWY_WANT_AVX3_DL
#define HWY_WANT_AVX3_DL
#endif

#include <cmath>
#include <string>
#include <vector>

#include "hwy/targets.h"
#include "kernels/test_util.h"
#include "maxctx/kernels/ref/matmul.h"

namespace maxctx::kernels {
namespace {

using testing_util::normal_values;

class Gemv : public ::testing::TestWithParam<int64_t> {  // a Highway target bit
 protected:
  void SetUp() override { hwy::SetSupportedTargetsForTest(GetParam()); }
  void TearDown() override { hwy::SetSupportedTargetsForTest(0); }
};

TEST_P(Gemv, MatchesReferenceAndRowRangesKeepTheirBits) {
  struct Shape {
    int64_t in_dim, out_dim;
  };
  for (const Shape s : {Shape{1, 1}, Shape{5, 3}, Shape{16, 4}, Shape{33, 9}, Shape{100, 13},
                        Shape{256, 86}, Shape{1024, 37}, Shape{0, 5}}) {
    SCOPED_TRACE(::testing::Message() << "in " << s.in_dim << " out " << s.out_dim);
    const std::vector<double> w = normal_values(s.out_dim * s.in_dim, "gemv/w", 0.0f, 1.0f);
    const std::vector<double> x = normal_values(s.in_dim, "gemv/x", 0.0f, 1.0f);
    const std::vector<float> wf(w.begin(), w.end()), xf(x.begin(), x.end());
    std::vector<float> out(s.out_dim, -1.0f);
    cpu::gemv_forward(out.data(), xf.data(), wf.data(), s.in_dim, s.out_dim);
    std::vector<double> wd(wf.begin(), wf.end()), xd(xf.begin(), xf.end());
    std::vector<double> ref_out(s.out_dim);
    ref::matmul_forward(ref_out.data(), xd.data(), wd.data(), 1, s.in_dim, s.out_dim);
    for (int64_t o = 0; o < s.out_dim; ++o) {
      double magnitude = 0.0;
      for (int64_t i = 0; i < s.in_dim; ++i) magnitude += std::fabs(wd[o * s.in_dim + i] * xd[i]);
      EXPECT_NEAR(out[o], ref_out[o], 1e-5 * std::max(1.0, magnitude)) << "row " << o;
    }
    // Every offset mod 4 (the row groups) and a few lengths.
    for (int64_t begin = 0; begin < std::min<int64_t>(s.out_dim, 6); ++begin) {
      for (int64_t end = begin + 1; end <= s.out_dim; end += 3) {
        std::vector<float> part(end - begin);
        cpu::gemv_forward(part.data(), xf.data(), wf.data() + begin * s.in_dim, s.in_dim,
                          end - begin);
        for (int64_t o = begin; o < end; ++o) {
          ASSERT_EQ(part[o - begin], out[o]) << "rows [" << begin << ", " << end << ")";
        }
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Targets, Gemv, ::testing::ValuesIn(hwy::SupportedAndGeneratedTargets()),
                         [](const ::testing::TestParamInfo<int64_t>& target) {
                           return std::string(hwy::TargetName(target.param));
                         });

}  // namespace
}  // namespace maxctx::kernels

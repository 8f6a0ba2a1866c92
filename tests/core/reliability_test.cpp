// The pieces of issue #21 that live in core/: the finiteness scan of loaded weights, the
// MAXCTX_FAULT parser, and the memory check's verdict.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "maxctx/core/check.h"
#include "maxctx/core/dtype.h"
#include "maxctx/core/fault_injection.h"
#include "maxctx/core/finite.h"
#include "maxctx/core/memory_check.h"

namespace maxctx {
namespace {

// Every position of a long buffer (several scan blocks), in f32 and bf16, for NaN, +Inf and
// -Inf; finite extremes (max, denormals, -0) are not flagged.
TEST(FirstNonFinite, FindsTheFirstNanOrInfInF32AndBf16) {
  const int64_t n = 10000;
  std::vector<float> values(n, 1.0f);
  values[1] = 3.0e38f;  // near the top of both ranges (f32 max itself rounds to bf16 Inf)
  values[2] = -3.0e38f;
  values[3] = std::numeric_limits<float>::denorm_min();
  values[4] = -0.0f;
  EXPECT_EQ(first_non_finite(TensorView::of(values.data(), n)), std::nullopt);
  for (const float bad :
       {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity(),
        -std::numeric_limits<float>::infinity()}) {
    for (const int64_t at : {int64_t{0}, int64_t{4095}, int64_t{4096}, n - 1}) {
      std::vector<float> f32 = values;
      f32[at] = bad;
      f32[n - 1] = bad;  // a later one does not hide the first
      EXPECT_EQ(first_non_finite(TensorView::of(f32.data(), n)), at);
      std::vector<bf16> half(n);
      convert_f32_to_bf16(f32, half);
      EXPECT_EQ(first_non_finite(TensorView(half.data(), DType::kBF16, Shape{n})), at);
    }
  }
  std::vector<bf16> finite(n);
  convert_f32_to_bf16(values, finite);
  EXPECT_EQ(first_non_finite(TensorView(finite.data(), DType::kBF16, Shape{n})), std::nullopt);
}

// Magnitudes from a power of two up (issue #34 N15's warning): 2^16 is found, just below is not,
// negative values count by magnitude, and a NaN counts as huge.
TEST(FirstWithMagnitudeAtLeast, FindsHugeFiniteValuesInF32AndBf16) {
  std::vector<float> values(5000, 1.0f);
  values[10] = 65000.0f;  // below 2^16 in bf16 too (65024)
  EXPECT_EQ(first_with_magnitude_at_least(TensorView::of(values.data(), 5000), 16), std::nullopt);
  values[4100] = -65536.0f;
  values[4200] = std::numeric_limits<float>::quiet_NaN();
  EXPECT_EQ(first_with_magnitude_at_least(TensorView::of(values.data(), 5000), 16), 4100);
  std::vector<bf16> half(values.size());
  convert_f32_to_bf16(values, half);
  EXPECT_EQ(first_with_magnitude_at_least(TensorView(half.data(), DType::kBF16, Shape{5000}), 16),
            4100);
  EXPECT_EQ(first_non_finite(TensorView::of(values.data(), 5000)), 4200);
}

std::string fault_error(const std::string& text) {
  try {
    parse_fault_plan(text);
  } catch (const Error& e) {
    return e.what();
  }
  return "no error";
}

TEST(FaultPlan, ParsesEveryKindInAnyOrder) {
  const FaultPlan plan = parse_fault_plan("kind=collective,step=12,rank=3");
  EXPECT_EQ(plan.rank, 3);
  EXPECT_EQ(plan.step, 12);
  EXPECT_EQ(plan.kind, FaultKind::kCollective);
  EXPECT_EQ(parse_fault_plan("rank=0,step=0,kind=write").kind, FaultKind::kWrite);
  EXPECT_EQ(parse_fault_plan("rank=1,step=2,kind=alloc").kind, FaultKind::kAlloc);
  EXPECT_EQ(parse_fault_plan("rank=1,step=2,kind=kill").kind, FaultKind::kKill);
}

TEST(FaultPlan, MalformedValuesAreOneLineErrors) {
  EXPECT_NE(fault_error("rank=1,step=3").find("needs rank, step and kind"), std::string::npos);
  EXPECT_NE(fault_error("rank=1,step=3,kind=boom").find("kind = 'boom' is not one of"),
            std::string::npos);
  EXPECT_NE(fault_error("rank=-1,step=3,kind=kill").find("rank = '-1' is not a non-negative"),
            std::string::npos);
  EXPECT_NE(fault_error("rank=1,step=3x,kind=kill").find("step = '3x'"), std::string::npos);
  EXPECT_NE(fault_error("rank=1,step=3,kind=kill,when=now").find("unknown key 'when'"),
            std::string::npos);
  EXPECT_NE(fault_error("rank=1,step,kind=kill").find("'step' is not key=value"),
            std::string::npos);
  EXPECT_NE(fault_error("rank=1,step=3,kind=kill_save_commit").find("which is rank 0"),
            std::string::npos);
}

// Unset, no injection point strikes.
TEST(FaultPlan, UnsetStrikesNowhere) {
  ASSERT_EQ(fault_plan(), std::nullopt) << "run this test without MAXCTX_FAULT";
  inject_fault(FaultKind::kWrite, 0);
  inject_step_faults(0);
}

// The verdict: a run whose lower bound exceeds the machine is refused with the sizes named; one
// that fits passes; the ranks of the busiest machine multiply the bound.
TEST(MemoryCheck, RefusesOnlyWhatCannotFit) {
  const double machine = static_cast<double>(physical_memory_bytes());
  ASSERT_GT(machine, 0);
  EXPECT_NO_THROW(check_fits_in_memory(machine / 4, 2, 1, "training", "weights"));
  EXPECT_NO_THROW(check_fits_in_memory(machine / 2, 4, 2, "training", "weights"));
  try {
    check_fits_in_memory(machine / 2, 3, 1, "training", "weights 1 GiB");
    ADD_FAILURE() << "3 ranks x half the machine fit";
  } catch (const Error& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find("training needs at least"), std::string::npos) << message;
    EXPECT_NE(message.find("x 3 rank(s) on this machine"), std::string::npos) << message;
    EXPECT_NE(message.find("(weights 1 GiB)"), std::string::npos) << message;
  }
  EXPECT_THROW(check_fits_in_memory(1e30, 1, 1, "inference", ""), Error);
  EXPECT_EQ(format_bytes(1536.0), "1.5 KiB");
}

}  // namespace
}  // namespace maxctx

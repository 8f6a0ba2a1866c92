#include "maxctx/core/dtype.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "maxctx/core/check.h"

namespace maxctx {
namespace {

TEST(DType, SizesAndNames) {
  EXPECT_EQ(dtype_size(DType::kF32), 4u);
  EXPECT_EQ(dtype_size(DType::kBF16), 2u);
  EXPECT_EQ(dtype_size(DType::kI8), 1u);
  EXPECT_EQ(parse_dtype("bfloat16"), DType::kBF16);
  EXPECT_EQ(parse_dtype("float32"), DType::kF32);
  EXPECT_EQ(dtype_name(DType::kI8), "int8");
  EXPECT_THROW(parse_dtype("float8"), Error);
}

TEST(DType, Bf16RoundsToNearestEven) {
  // 1 + 2^-8 lies exactly between bf16 neighbours 1 and 1 + 2^-7: ties go to the even one (1).
  EXPECT_EQ(bf16_to_float(float_to_bf16(1.0f + 0x1.0p-8f)), 1.0f);
  // 1 + 3·2^-8 is a tie between 1 + 2^-7 (odd) and 1 + 2^-6 (even).
  EXPECT_EQ(bf16_to_float(float_to_bf16(1.0f + 3 * 0x1.0p-8f)), 1.0f + 0x1.0p-6f);
  // Just above the tie rounds up.
  EXPECT_EQ(bf16_to_float(float_to_bf16(1.0f + 0x1.0p-8f + 0x1.0p-20f)), 1.0f + 0x1.0p-7f);
  EXPECT_EQ(bf16_to_float(float_to_bf16(-2.5f)), -2.5f);
  EXPECT_TRUE(std::isnan(bf16_to_float(float_to_bf16(std::numeric_limits<float>::quiet_NaN()))));
  EXPECT_TRUE(std::isinf(bf16_to_float(float_to_bf16(std::numeric_limits<float>::infinity()))));
}

TEST(DType, Bf16RoundTripWithinHalfUlp) {
  std::vector<float> values;
  for (int i = -1000; i <= 1000; ++i) values.push_back(static_cast<float>(i) * 0.0137f);
  std::vector<bf16> packed(values.size());
  std::vector<float> back(values.size());
  convert_f32_to_bf16(values, packed);
  convert_bf16_to_f32(packed, back);
  for (size_t i = 0; i < values.size(); ++i) {
    EXPECT_LE(std::fabs(back[i] - values[i]), std::fabs(values[i]) * 0x1.0p-8f) << values[i];
  }
}

TEST(DType, Int8QuantizationIsSymmetricAndBounded) {
  std::vector<float> values = {0.0f, 1.0f, -2.0f, 0.5f, 1.99f, -0.01f};
  std::vector<int8_t> codes(values.size());
  const float scale = quantize_int8(values, codes);
  EXPECT_FLOAT_EQ(scale, 2.0f / 127.0f);
  EXPECT_EQ(codes[2], -127);
  EXPECT_EQ(codes[0], 0);
  std::vector<float> back(values.size());
  dequantize_int8(codes, scale, back);
  for (size_t i = 0; i < values.size(); ++i) {
    EXPECT_LE(std::fabs(back[i] - values[i]), scale / 2 + 1e-7f);
  }
  std::vector<float> zeros(4, 0.0f);
  std::vector<int8_t> zero_codes(4, 1);
  EXPECT_EQ(quantize_int8(zeros, zero_codes), 0.0f);
  EXPECT_EQ(zero_codes[3], 0);
}

}  // namespace
}  // namespace maxctx

#include "maxctx/core/dtype.h"

#include <algorithm>
#include <cmath>

#include "maxctx/core/check.h"

namespace maxctx {

size_t dtype_size(DType dtype) {
  switch (dtype) {
    case DType::kF32:
      return 4;
    case DType::kBF16:
      return 2;
    case DType::kI8:
      return 1;
  }
  MAXCTX_CHECK(false, "unknown dtype {}", static_cast<int>(dtype));
}

std::string_view dtype_name(DType dtype) {
  switch (dtype) {
    case DType::kF32:
      return "f32";
    case DType::kBF16:
      return "bf16";
    case DType::kI8:
      return "int8";
  }
  MAXCTX_CHECK(false, "unknown dtype {}", static_cast<int>(dtype));
}

std::string_view dtype_config_name(DType dtype) {
  switch (dtype) {
    case DType::kF32:
      return "float32";
    case DType::kBF16:
      return "bfloat16";
    case DType::kI8:
      return "int8";
  }
  MAXCTX_CHECK(false, "unknown dtype {}", static_cast<int>(dtype));
}

DType parse_dtype(std::string_view name) {
  if (name == "f32" || name == "float32") return DType::kF32;
  if (name == "bf16" || name == "bfloat16") return DType::kBF16;
  if (name == "int8") return DType::kI8;
  fail("unknown dtype '{}': allowed are float32 (f32), bfloat16 (bf16), int8", name);
}

void convert_f32_to_bf16(std::span<const float> in, std::span<bf16> out) {
  MAXCTX_CHECK_EQ(in.size(), out.size(), "conversion needs equal element counts");
  for (size_t i = 0; i < in.size(); ++i) out[i] = float_to_bf16(in[i]);
}

void convert_bf16_to_f32(std::span<const bf16> in, std::span<float> out) {
  MAXCTX_CHECK_EQ(in.size(), out.size(), "conversion needs equal element counts");
  for (size_t i = 0; i < in.size(); ++i) out[i] = bf16_to_float(in[i]);
}

float quantize_int8(std::span<const float> in, std::span<int8_t> out) {
  MAXCTX_CHECK_EQ(in.size(), out.size(), "quantization needs equal element counts");
  float max_abs = 0.0f;
  for (float x : in) max_abs = std::max(max_abs, std::fabs(x));
  if (max_abs == 0.0f) {
    std::fill(out.begin(), out.end(), int8_t{0});
    return 0.0f;
  }
  const float scale = max_abs / 127.0f;
  const float inverse = 127.0f / max_abs;
  for (size_t i = 0; i < in.size(); ++i) {
    const float q = std::nearbyint(in[i] * inverse);
    out[i] = static_cast<int8_t>(std::clamp(q, -127.0f, 127.0f));
  }
  return scale;
}

void dequantize_int8(std::span<const int8_t> in, float scale, std::span<float> out) {
  MAXCTX_CHECK_EQ(in.size(), out.size(), "dequantization needs equal element counts");
  for (size_t i = 0; i < in.size(); ++i) out[i] = static_cast<float>(in[i]) * scale;
}

}  // namespace maxctx

// Element types maxctx stores: f32 (master weights, activations), bf16 (storage and checkpoints),
// int8 (quantized weights and KV cache, always with a separate f32 scale).
//
// bf16 conversion rounds to nearest even and keeps NaN a NaN; it is the conversion every path
// uses, so a tensor converted on one rank equals the same tensor converted on another.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <string_view>

namespace maxctx {

enum class DType : uint8_t { kF32, kBF16, kI8 };

size_t dtype_size(DType dtype);
std::string_view dtype_name(DType dtype);  // "f32", "bf16", "int8"
// The config's (MaxText's) name: "float32", "bfloat16", "int8" (hardware profile table kinds).
std::string_view dtype_config_name(DType dtype);
// Parses "f32"/"float32", "bf16"/"bfloat16", "int8"; throws maxctx::Error otherwise.
DType parse_dtype(std::string_view name);

// A bfloat16 value: the upper 16 bits of an IEEE float.
struct bf16 {
  uint16_t bits = 0;
};

inline float bf16_to_float(bf16 value) {
  const uint32_t widened = static_cast<uint32_t>(value.bits) << 16;
  float out;
  std::memcpy(&out, &widened, sizeof(out));
  return out;
}

inline bf16 float_to_bf16(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof(bits));
  if ((bits & 0x7fffffffu) > 0x7f800000u) {
    return bf16{static_cast<uint16_t>((bits >> 16) | 0x0040u)};  // quiet NaN, sign kept
  }
  const uint32_t rounding = 0x7fffu + ((bits >> 16) & 1u);  // round half to even
  return bf16{static_cast<uint16_t>((bits + rounding) >> 16)};
}

void convert_f32_to_bf16(std::span<const float> in, std::span<bf16> out);
void convert_bf16_to_f32(std::span<const bf16> in, std::span<float> out);

// Symmetric int8 quantization of one group with a single scale: q = round(x / scale),
// scale = max|x| / 127, q clamped to [-127, 127]. Returns the scale (0 for an all-zero group,
// whose codes are all 0). Dequantize: x ≈ q * scale.
float quantize_int8(std::span<const float> in, std::span<int8_t> out);
void dequantize_int8(std::span<const int8_t> in, float scale, std::span<float> out);

}  // namespace maxctx

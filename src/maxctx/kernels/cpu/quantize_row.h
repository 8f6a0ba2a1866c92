// One row's int8 quantization, vectorized: the rule of ref::quantize_row_int8 (scale =
// max|x| / levels; code = clamp(round-half-even(x · levels / max|x|), ±127); an all-zero row gives
// zero codes and scale 0), bit for bit. Two code layouts: signed codes (the KV cache, weights) and
// codes + 128 as unsigned bytes (the activations vpdpbusd multiplies). Both call sites used a
// scalar loop that ran at about 0.2 G elements/s, a fifth of an int8 prefill.
#pragma once

#include <cstdint>

namespace maxctx::kernels::cpu {

// Returns the row's scale.
float quantize_row_signed(int8_t* codes, const float* x, int64_t n, float levels);
float quantize_row_offset(uint8_t* codes, const float* x, int64_t n, float levels);

}  // namespace maxctx::kernels::cpu

// The vector micro-tile of gemm_bf16 for CPUs without AMX: TDPBF16PS's rounding sequence
// (gemm_bf16.h) in plain vector FMAs and adds, bit for bit the portable tile's result wherever it
// runs. The portable tile flushes every subnormal intermediate to zero; the vector tile does not,
// so it may only run where no intermediate can be subnormal. That holds when the packed operands'
// smallest nonzero exponents are large enough:
//
// A packed operand is bf16 (a bf16 subnormal is already a signed zero), so a nonzero a is a
// multiple of ulp(a) = 2^(e_a − 7), e_a its unbiased exponent, and so a multiple of
// 2^(ea_min − 7), ea_min the smallest exponent among A's nonzero values. Every product a·b is then
// a multiple of g = 2^(ea_min + eb_min − 14), and exact in fp32 unless it overflows (16
// significant bits; no underflow while g ≥ 2^−126). Every exact sum of multiples of g is one, and
// so is its fp32 rounding: when ulp(x) ≥ g the rounding is a multiple of ulp(x), a power of two;
// when ulp(x) < g, x = n·g has at most 24 significant bits and is exact. By induction every FMA
// and add of the sequence yields a multiple of g, so a nonzero intermediate has |x| ≥ g; with g ≥
// FLT_MIN = 2^−126 none is subnormal and every flush is the identity (zeros and infinities pass it
// unchanged too). NaN payloads are the one thing the two tiles could disagree on (x86 keeps the
// NaN of the first operand, and the compiler chooses operand order), so an operand holding an
// infinity or NaN also takes the portable tile; finite operands can only make the default NaN
// (∞ − ∞ after an overflow), which both tiles propagate alike.
#pragma once

#include <cstdint>

namespace maxctx::kernels::cpu {

// gemm_bf16's micro-tile: rows and columns of C, and pairs of K per chunk (one TDPBF16PS).
inline constexpr int64_t kBf16TileRows = 32;
inline constexpr int64_t kBf16TileCols = 32;
inline constexpr int64_t kBf16ChunkPairs = 16;

// The biased exponent fields (1-254 normal, 255 infinity or NaN) of the bf16 halves of packed
// words, zeros left out.
struct Bf16Exponents {
  uint32_t min_nonzero = 255;  // 255 also when every value is zero
  uint32_t max = 0;            // 0 when every value is zero
};
Bf16Exponents bf16_exponents(const uint32_t* words, int64_t count);

// Whether the vector tile gives the portable tile's bits on A and B operands with these exponents
// (the reasoning above): both finite, and 2^(ea_min − 7) · 2^(eb_min − 7) ≥ 2^−126.
inline bool bf16_sums_stay_normal(Bf16Exponents a, Bf16Exponents b) {
  // Unbiased: (a − 127) + (b − 127) − 14 ≥ −126  ⇔  a + b ≥ 142 (biased).
  constexpr uint32_t kMinBiasedSum = 2 * 127 + 14 - 126;
  return a.max < 255 && b.max < 255 && a.min_nonzero + b.min_nonzero >= kMinBiasedSum;
}

// Whether this CPU runs the vector tile (its best Highway target has a fused multiply-add).
bool bf16_vector_tile_available();
// The Highway target the vector tile runs on this CPU ("AVX3_DL", "AVX3", "AVX2", ...).
const char* bf16_vector_tile_target();

// Micro-panels widened to fp32 for the vector tile: per chunk of kBf16ChunkPairs pairs,
// kBf16WideChunkFloats floats, the even elements of the pairs then the odd ones; A's as [row][pair]
// (kBf16TileRows × kBf16ChunkPairs each), B's as [pair][column] (kBf16ChunkPairs × kBf16TileCols).
// 64-byte aligned. `pairs` (a multiple of kBf16ChunkPairs) words per row of the packed A
// micro-panel (word (r, q) at r · pairs + q) or column of the packed B micro-panel (word (q, j) at
// q · kBf16TileCols + j).
inline constexpr int64_t kBf16WideChunkFloats = 2 * kBf16TileRows * kBf16ChunkPairs;
static_assert(kBf16TileRows == kBf16TileCols);
void bf16_widen_a_panel(int64_t pairs, const uint32_t* a, float* wide);
void bf16_widen_b_panel(int64_t pairs, const uint32_t* b, float* wide);

// acc = the K block's sums of a 32 × 32 tile (row-major, 64-byte aligned) without any flush, from
// widened A and B micro-panels. Only where bf16_sums_stay_normal holds for the two panels are
// these the portable tile's sums.
void bf16_vector_tile_sums(int64_t pairs, const float* wide_a, const float* wide_b, float* acc);

}  // namespace maxctx::kernels::cpu

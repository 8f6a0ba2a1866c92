// The vdpbf16ps and AMX throughput probes of fma_peak.h: kFmaChains independent vdpbf16ps chains
// on 512-bit vectors, and four independent 16 × 16 AMX accumulators (tdpbf16ps on 2 A and 2 B
// tiles, the GEMM's micro-kernel with its operands in tile registers), each compiled with a
// function attribute (the baseline is AVX2) and run only where the CPU has it. The operands are
// normal numbers: a subnormal bf16 operand slowed the loop by a third on Sapphire Rapids.
#include <immintrin.h>

#include "kernels/fma_peak.h"

namespace maxctx::bench {
namespace {

__attribute__((target("avx512f,avx512bf16"))) float dpbf16_chains(int64_t iterations) {
  __m512 acc[kFmaChains];
  for (int j = 0; j < kFmaChains; ++j) acc[j] = _mm512_set1_ps(static_cast<float>(j));
  __m512bh a = (__m512bh)_mm512_set1_epi32(0x3f803f80);        // (1, 1)
  const __m512bh b = (__m512bh)_mm512_set1_epi32(0x0d800d80);  // (2^-100, 2^-100)
  for (int64_t i = 0; i < iterations; ++i) {
#pragma GCC unroll 12
    for (int j = 0; j < kFmaChains; ++j) acc[j] = _mm512_dpbf16_ps(acc[j], a, b);
    __asm__ volatile("" : "+v"(a));  // keeps the loop from being folded
  }
  __m512 sum = acc[0];
  for (int j = 1; j < kFmaChains; ++j) sum = _mm512_add_ps(sum, acc[j]);
  alignas(64) float lanes[16];
  _mm512_store_ps(lanes, sum);
  float total = 0;
  for (const float lane : lanes) total += lane;
  return total;
}

// The 64-byte tile configuration: palette 1, then tiles 0-7 of 16 rows × 64 bytes.
struct alignas(64) TileConfig {
  uint8_t bytes[64] = {1};
  TileConfig() {
    for (int t = 0; t < 8; ++t) {
      bytes[16 + 2 * t] = 64;  // bytes per row, little-endian uint16 at 16 + 2t
      bytes[48 + t] = 16;      // rows at 48 + t
    }
  }
};

__attribute__((target("amx-tile,amx-bf16"))) float amx_tiles(int64_t iterations) {
  static const TileConfig config;
  alignas(64) uint16_t ones[16 * 32];
  for (uint16_t& x : ones) x = 0x3f80;  // 1.0
  alignas(64) float c[16 * 16];
  _tile_loadconfig(&config);
  _tile_zero(0);
  _tile_zero(1);
  _tile_zero(2);
  _tile_zero(3);
  _tile_loadd(4, ones, 64);
  _tile_loadd(5, ones, 64);
  _tile_loadd(6, ones, 64);
  _tile_loadd(7, ones, 64);
  for (int64_t i = 0; i < iterations; ++i) {
    _tile_dpbf16ps(0, 4, 6);
    _tile_dpbf16ps(1, 4, 7);
    _tile_dpbf16ps(2, 5, 6);
    _tile_dpbf16ps(3, 5, 7);
  }
  _tile_stored(0, c, 64);
  _tile_release();
  return c[0];
}

}  // namespace

float run_amx_tiles(int64_t iterations) { return amx_tiles(iterations); }

bool dpbf16_available() {
  return __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512bf16");
}
float run_dpbf16_chains(int64_t iterations) { return dpbf16_chains(iterations); }

}  // namespace maxctx::bench

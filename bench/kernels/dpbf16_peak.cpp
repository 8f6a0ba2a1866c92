// The vdpbf16ps throughput probe of fma_peak.h: kFmaChains independent chains on 512-bit
// vectors, compiled for AVX512_BF16 with a function attribute (the baseline is AVX2) and run
// only where the CPU has it. The operands are normal numbers: a subnormal bf16 operand slowed
// the loop by a third on Sapphire Rapids.
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

}  // namespace

bool dpbf16_available() {
  return __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512bf16");
}
float run_dpbf16_chains(int64_t iterations) { return dpbf16_chains(iterations); }

}  // namespace maxctx::bench

// SIMD kernels of a cpu attention tile (see attention_tiles.h), one copy per Highway target.
//
// Tile GEMM: a micro-tile is kTileM rows × kTileVectors vectors of C held in registers (8 × 2
// zmm = 16 accumulators with AVX-512: enough independent FMA chains for 2 FMA pipes × 4 cycles
// of latency, and with 2 B vectors and a broadcast still inside 32 vector registers). Each step
// of K loads one row of B and broadcasts kTileM values of A. N is the outer loop: a K × panel
// slice of B is first copied into a contiguous, zero-padded buffer (its rows are read in order,
// which the hardware prefetchers follow; the micro-tiles' strided walk over a B block fresh from
// L3 ran about 15% slower), then stays in L1 while the micro-tiles walk down M. The last vector
// of each row of C is loaded and stored under a mask, so any N works.
//
// Only Highway vectors and plain arrays live in the per-target code (no std containers): the
// baseline is AVX2 because g++ 12.2 miscompiles constant std::vector initialisers under AVX-512.
#include "maxctx/kernels/cpu/attention_tiles.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <cmath>
#include <cstddef>
#include <limits>
#include <utility>

#include "hwy/aligned_allocator.h"
#include "maxctx/core/check.h"
#include "maxctx/kernels/cpu/amx.h"

#ifndef MAXCTX_ATTENTION_TILES_ONCE  // this file is compiled once per SIMD target
#define MAXCTX_ATTENTION_TILES_ONCE
#include <immintrin.h>

namespace maxctx::kernels::cpu {
namespace {

// ---------------------------------------------------------------- bf16 products, AMX
// Compiled once, for AMX by attribute, and called only where amx_bf16_usable() (attention_tiles.h
// gives the sequence of roundings, TDPBF16PS's). A micro-tile is 2 × 2 C tiles of 16 × 16 fp32
// (tmm0-3) fed by 2 A tiles (tmm4-5: 16 rows × 32 bf16 of A) and 2 B tiles (tmm6-7: 16 pairs ×
// 16 columns of the packed panel, whose rows are 128 bytes apart): 32 rows × one panel of 32
// columns, K in chunks of 32. A is read in place where a tile lies inside it, else from a
// zero-padded copy (the last rows, a K chunk cut short).
#define MAXCTX_AMX_TARGET \
  __attribute__((target("amx-tile,amx-bf16,avx512f,avx512bw,avx512vl,avx512dq,fma")))

// tile = rows [r0, r0 + 16) × columns [k0, k0 + 32) of A (m, k), zero past m and k.
MAXCTX_AMX_TARGET void pad_a_tile(uint16_t* tile, const uint16_t* a, int64_t lda, int64_t m,
                                  int64_t k, int64_t r0, int64_t k0) {
  const int64_t rows = std::min<int64_t>(16, m - r0);
  const __mmask32 live = static_cast<__mmask32>((uint64_t{1} << std::min<int64_t>(32, k - k0)) - 1);
  for (int64_t r = 0; r < 16; ++r) {
    const __m512i row =
        r < rows ? _mm512_maskz_loadu_epi16(live, a + (r0 + r) * lda + k0) : _mm512_setzero_si512();
    _mm512_store_si512(tile + r * 32, row);
  }
}

// c (rows, cols) = alpha · tile, or fma(alpha, tile, c); tile 16 × 16 fp32.
MAXCTX_AMX_TARGET void store_c_tile(const float* tile, int64_t rows, int64_t cols, float alpha,
                                    bool accumulate, float* c, int64_t ldc) {
  const __m512 v_alpha = _mm512_set1_ps(alpha);
  const __mmask16 mask = static_cast<__mmask16>((1u << std::min<int64_t>(16, cols)) - 1u);
  for (int64_t r = 0; r < rows; ++r) {
    const __m512 sum = _mm512_load_ps(tile + r * 16);
    float* c_row = c + r * ldc;
    const __m512 result = accumulate
                              ? _mm512_fmadd_ps(sum, v_alpha, _mm512_maskz_loadu_ps(mask, c_row))
                              : _mm512_mul_ps(sum, v_alpha);
    _mm512_mask_storeu_ps(c_row, mask, result);
  }
}

// C (m, cols <= kBf16Panel) = alpha · A · B (or +=) for one packed panel of B.
MAXCTX_AMX_TARGET void amx_panel(int64_t m, int64_t cols, int64_t k, float alpha, const bf16* a,
                                 int64_t lda, const uint32_t* panel, bool accumulate, float* c,
                                 int64_t ldc) {
  amx_load_tile_config();
  alignas(64) uint16_t a_pad[2][16 * 32];
  alignas(64) float sums[4][16 * 16];
  const auto* a_bits = reinterpret_cast<const uint16_t*>(a);
  const int64_t chunks = (k + 31) / 32;
  const int64_t a_stride = lda * static_cast<int64_t>(sizeof(bf16));
  const bool right = cols > 16;
  for (int64_t m0 = 0; m0 < m; m0 += 32) {
    const bool lower = m - m0 > 16;
    _tile_zero(0);
    _tile_zero(1);
    _tile_zero(2);
    _tile_zero(3);
    for (int64_t ch = 0; ch < chunks; ++ch) {
      const int64_t k0 = ch * 32;
      const bool whole_k = k - k0 >= 32;
      if (whole_k && m - m0 >= 16) {
        _tile_loadd(4, a_bits + m0 * lda + k0, a_stride);
      } else {
        pad_a_tile(a_pad[0], a_bits, lda, m, k, m0, k0);
        _tile_loadd(4, a_pad[0], 64);
      }
      const uint32_t* b_rows = panel + ch * 16 * kBf16Panel;
      _tile_loadd(6, b_rows, kBf16Panel * 4);
      _tile_dpbf16ps(0, 4, 6);
      if (right) {
        _tile_loadd(7, b_rows + 16, kBf16Panel * 4);
        _tile_dpbf16ps(1, 4, 7);
      }
      if (lower) {
        if (whole_k && m - m0 >= 32) {
          _tile_loadd(5, a_bits + (m0 + 16) * lda + k0, a_stride);
        } else {
          pad_a_tile(a_pad[1], a_bits, lda, m, k, m0 + 16, k0);
          _tile_loadd(5, a_pad[1], 64);
        }
        _tile_dpbf16ps(2, 5, 6);
        if (right) _tile_dpbf16ps(3, 5, 7);
      }
    }
    _tile_stored(0, sums[0], 64);
    if (right) _tile_stored(1, sums[1], 64);
    if (lower) _tile_stored(2, sums[2], 64);
    if (lower && right) _tile_stored(3, sums[3], 64);
    const int64_t upper_rows = std::min<int64_t>(16, m - m0);
    float* c_block = c + m0 * ldc;
    store_c_tile(sums[0], upper_rows, cols, alpha, accumulate, c_block, ldc);
    if (right) store_c_tile(sums[1], upper_rows, cols - 16, alpha, accumulate, c_block + 16, ldc);
    if (lower) {
      const int64_t lower_rows = m - m0 - 16 < 16 ? m - m0 - 16 : 16;
      store_c_tile(sums[2], lower_rows, cols, alpha, accumulate, c_block + 16 * ldc, ldc);
      if (right) {
        store_c_tile(sums[3], lower_rows, cols - 16, alpha, accumulate, c_block + 16 * ldc + 16,
                     ldc);
      }
    }
  }
  amx_release_tiles();
}

}  // namespace
}  // namespace maxctx::kernels::cpu
#endif  // MAXCTX_ATTENTION_TILES_ONCE

// Highway 1.0.3 drops AVX3_DL from its dynamic targets unless asked (see elementwise.cpp).
#ifndef HWY_WANT_AVX3_DL
#define HWY_WANT_AVX3_DL
#endif
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "maxctx/kernels/cpu/attention_tiles.cpp"
// foreach_target.h must precede highway.h and the -inl.h headers.
// clang-format off
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
#include "hwy/contrib/math/math-inl.h"
// clang-format on

HWY_BEFORE_NAMESPACE();
namespace maxctx::kernels::cpu {
namespace HWY_NAMESPACE {
// Internal linkage: other kernels' per-target functions share these namespaces.
namespace {
namespace hn = hwy::HWY_NAMESPACE;
using FloatTag = hn::ScalableTag<float>;
using FloatVec = hn::Vec<FloatTag>;

constexpr float kNegInfF = -std::numeric_limits<float>::infinity();
constexpr int kTileM = 8;
constexpr int kTileVectors = 2;

// ---------------------------------------------------------------- tile GEMM

using MicroTile = void (*)(int64_t depth, float alpha, const float* a, int64_t lda,
                           const float* b_panel, bool accumulate, float* c, int64_t ldc,
                           size_t last_lanes);

// C[rows × vectors] (+)= alpha · A · B for one micro-tile. b_panel holds depth rows of
// kTileVectors · lanes floats (zero past N); last_lanes of the last vector of C are live.
template <int kRows, int kVectors, bool kTransposedA>
void micro_tile(int64_t depth, float alpha, const float* a, int64_t lda, const float* b_panel,
                bool accumulate, float* c, int64_t ldc, size_t last_lanes) {
  const FloatTag d;
  const size_t lanes = hn::Lanes(d);
  const int64_t panel = kTileVectors * static_cast<int64_t>(lanes);
  FloatVec acc[kRows][kVectors];
#pragma GCC unroll 8
  for (int i = 0; i < kRows; ++i) {
#pragma GCC unroll 2
    for (int j = 0; j < kVectors; ++j) acc[i][j] = hn::Zero(d);
  }
  for (int64_t p = 0; p < depth; ++p) {
    const float* b_row = b_panel + p * panel;
    FloatVec b_vec[kVectors];
#pragma GCC unroll 2
    for (int j = 0; j < kVectors; ++j) b_vec[j] = hn::Load(d, b_row + j * lanes);
#pragma GCC unroll 8
    for (int i = 0; i < kRows; ++i) {
      const auto a_val = hn::Set(d, kTransposedA ? a[p * lda + i] : a[i * lda + p]);
#pragma GCC unroll 2
      for (int j = 0; j < kVectors; ++j) acc[i][j] = hn::MulAdd(a_val, b_vec[j], acc[i][j]);
    }
  }
  const auto v_alpha = hn::Set(d, alpha);
  const auto last_mask = hn::FirstN(d, last_lanes);
#pragma GCC unroll 8
  for (int i = 0; i < kRows; ++i) {
    float* c_row = c + i * ldc;
#pragma GCC unroll 2
    for (int j = 0; j + 1 < kVectors; ++j) {
      auto result = hn::Mul(acc[i][j], v_alpha);
      if (accumulate) result = hn::Add(result, hn::LoadU(d, c_row + j * lanes));
      hn::StoreU(result, d, c_row + j * lanes);
    }
    float* c_last = c_row + (kVectors - 1) * lanes;
    auto result = hn::Mul(acc[i][kVectors - 1], v_alpha);
    if (accumulate) result = hn::Add(result, hn::MaskedLoad(last_mask, d, c_last));
    hn::BlendedStore(result, last_mask, d, c_last);
  }
}

// kMicroTiles[transposed][vectors - 1][rows - 1]
template <bool kTransposedA, int kVectors, size_t... kRowsMinusOne>
constexpr std::array<MicroTile, kTileM> rows_table(std::index_sequence<kRowsMinusOne...>) {
  return {&micro_tile<static_cast<int>(kRowsMinusOne) + 1, kVectors, kTransposedA>...};
}
template <bool kTransposedA>
constexpr std::array<std::array<MicroTile, kTileM>, kTileVectors> vectors_table() {
  static_assert(kTileVectors == 2, "one entry per vector count");
  return {rows_table<kTransposedA, 1>(std::make_index_sequence<kTileM>()),
          rows_table<kTransposedA, 2>(std::make_index_sequence<kTileM>())};
}
constexpr std::array<std::array<std::array<MicroTile, kTileM>, kTileVectors>, 2> kMicroTiles = {
    vectors_table<false>(), vectors_table<true>()};

int64_t gemm_panel() { return kTileVectors * static_cast<int64_t>(hn::Lanes(FloatTag())); }

// packed_b: room for k · gemm_panel() floats, 64-byte aligned.
void tile_gemm(int64_t m, int64_t n, int64_t k, float alpha, const float* a, int64_t lda,
               bool a_transposed, const float* b, int64_t ldb, bool accumulate, float* c,
               int64_t ldc, float* packed_b) {
  const FloatTag d;
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(d));
  const int64_t panel = gemm_panel();
  for (int64_t n0 = 0; n0 < n; n0 += panel) {
    const int64_t cols = std::min(panel, n - n0);
    const int64_t vectors = (cols + lanes - 1) / lanes;
    const size_t last_lanes = static_cast<size_t>(cols - (vectors - 1) * lanes);
    for (int64_t p = 0; p < k; ++p) {
      const float* src = b + p * ldb + n0;
      float* dst = packed_b + p * panel;
      for (int64_t j = 0; j < kTileVectors; ++j) {
        const int64_t live = std::clamp<int64_t>(cols - j * lanes, 0, lanes);
        const auto mask = hn::FirstN(d, static_cast<size_t>(live));
        hn::Store(hn::MaskedLoad(mask, d, src + j * lanes), d, dst + j * lanes);
      }
    }
    for (int64_t m0 = 0; m0 < m; m0 += kTileM) {
      const int64_t rows = std::min<int64_t>(kTileM, m - m0);
      const MicroTile tile = kMicroTiles[a_transposed][vectors - 1][rows - 1];
      tile(k, alpha, a_transposed ? a + m0 : a + m0 * lda, lda, packed_b, accumulate,
           c + m0 * ldc + n0, ldc, last_lanes);
    }
  }
}

// ---------------------------------------------------------------- softmax rows
// n is a multiple of kAttentionScoreAlign, hence of the lanes, and rows are 64-byte aligned.

float row_max(const float* x, int64_t n) {
  const FloatTag d;
  const int64_t step = hn::Lanes(d);
  auto max0 = hn::Set(d, kNegInfF);
  auto max1 = max0;
  int64_t i = 0;
  for (; i + 2 * step <= n; i += 2 * step) {
    max0 = hn::Max(max0, hn::Load(d, x + i));
    max1 = hn::Max(max1, hn::Load(d, x + i + step));
  }
  for (; i < n; i += step) max0 = hn::Max(max0, hn::Load(d, x + i));
  return hn::GetLane(hn::MaxOfLanes(d, hn::Max(max0, max1)));
}

// x = exp(x - shift); returns the sum of the new x. Exp returns 0 below -104, so -inf gives 0.
float exp_shift_sum(float* x, int64_t n, float shift) {
  const FloatTag d;
  const int64_t step = hn::Lanes(d);
  const auto v_shift = hn::Set(d, shift);
  auto sum0 = hn::Zero(d);
  auto sum1 = hn::Zero(d);
  int64_t i = 0;
  for (; i + 2 * step <= n; i += 2 * step) {
    const auto e0 = hn::Exp(d, hn::Sub(hn::Load(d, x + i), v_shift));
    const auto e1 = hn::Exp(d, hn::Sub(hn::Load(d, x + i + step), v_shift));
    hn::Store(e0, d, x + i);
    hn::Store(e1, d, x + i + step);
    sum0 = hn::Add(sum0, e0);
    sum1 = hn::Add(sum1, e1);
  }
  for (; i < n; i += step) {
    const auto e = hn::Exp(d, hn::Sub(hn::Load(d, x + i), v_shift));
    hn::Store(e, d, x + i);
    sum0 = hn::Add(sum0, e);
  }
  return hn::GetLane(hn::SumOfLanes(d, hn::Add(sum0, sum1)));
}

// Head-dim rows are not padded: any length, with a scalar tail.
void scale_row(float* x, int64_t n, float alpha) {
  const FloatTag d;
  const int64_t step = hn::Lanes(d);
  const auto v_alpha = hn::Set(d, alpha);
  int64_t i = 0;
  for (; i + step <= n; i += step) hn::StoreU(hn::Mul(hn::LoadU(d, x + i), v_alpha), d, x + i);
  for (; i < n; ++i) x[i] *= alpha;
}

void mask_scores(float* score, int64_t ld, int64_t rows, int64_t keys, int64_t width,
                 const float* mask, int64_t tokens) {
  const FloatTag d;
  const int64_t step = hn::Lanes(d);
  for (int64_t r = 0; r < rows; ++r) {
    float* row = score + r * ld;
    std::fill(row + keys, row + width, kNegInfF);
    if (mask == nullptr) continue;
    const float* mask_row = mask + (r % tokens) * ld;
    for (int64_t i = 0; i < width; i += step) {
      hn::Store(hn::Add(hn::Load(d, row + i), hn::Load(d, mask_row + i)), d, row + i);
    }
  }
}

void softmax_step(float* score, int64_t ld, int64_t rows, int64_t width, float* row_max_io,
                  float* row_sum, float* acc, int64_t dim) {
  for (int64_t r = 0; r < rows; ++r) {
    float* p_row = score + r * ld;
    const float m_old = row_max_io[r];
    const float m_new = std::max(m_old, row_max(p_row, width));
    if (m_new == kNegInfF) {  // nothing visible yet: exp(-inf - -inf) would be NaN
      std::fill(p_row, p_row + width, 0.0f);
      continue;
    }
    const float alpha = std::exp(m_old - m_new);  // 0 on the first visible tile
    row_sum[r] = row_sum[r] * alpha + exp_shift_sum(p_row, width, m_new);
    if (alpha != 1.0f) scale_row(acc + r * dim, dim, alpha);
    row_max_io[r] = m_new;
  }
}

void softmax_backward(float* prob, float* d_score, int64_t ld, int64_t rows, int64_t width,
                      const float* lse, const float* delta) {
  const FloatTag d;
  const int64_t step = hn::Lanes(d);
  for (int64_t r = 0; r < rows; ++r) {
    float* p_row = prob + r * ld;
    float* ds_row = d_score + r * ld;
    if (lse[r] == kNegInfF) {  // the row sees no key at all: P = 0, not exp(nan)
      std::fill(p_row, p_row + width, 0.0f);
      std::fill(ds_row, ds_row + width, 0.0f);
      continue;
    }
    const auto v_lse = hn::Set(d, lse[r]);
    const auto v_delta = hn::Set(d, delta[r]);
    for (int64_t i = 0; i < width; i += step) {
      const auto p = hn::Exp(d, hn::Sub(hn::Load(d, p_row + i), v_lse));
      hn::Store(p, d, p_row + i);
      hn::Store(hn::Mul(p, hn::Sub(hn::Load(d, ds_row + i), v_delta)), d, ds_row + i);
    }
  }
}

// ---------------------------------------------------------------- bf16 products, portable
// TDPBF16PS's sequence in fp32 FMAs (attention_tiles.h): per chunk of 16 pairs an even and an
// odd lane sum, inputs and every sum flushed to a signed zero when denormal, then the chunk's
// sum added to the accumulator.

using U32Tag = hn::RebindToUnsigned<FloatTag>;
constexpr int64_t kPanelVectors = kBf16Panel / static_cast<int64_t>(hn::MaxLanes(FloatTag()));
constexpr int kPortableRows = 4;

HWY_INLINE FloatVec flush_denormal(FloatVec x) {
  const FloatTag d;
  const U32Tag du;
  const auto bits = hn::BitCast(du, x);
  const auto tiny = hn::Eq(hn::And(bits, hn::Set(du, 0x7f800000u)), hn::Zero(du));
  return hn::BitCast(d, hn::IfThenElse(tiny, hn::And(bits, hn::Set(du, 0x80000000u)), bits));
}

template <int kRows>
void bf16_micro_tile_portable(int64_t k, float alpha, const uint32_t* a, int64_t lda_words,
                              const uint32_t* b_panel, bool accumulate, float* c, int64_t ldc,
                              int64_t cols) {
  const FloatTag d;
  const U32Tag du;
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(d));
  const int64_t vectors = (cols + lanes - 1) / lanes;
  const int64_t pairs = (k + 1) / 2;
  const auto high_half = hn::Set(du, 0xffff0000u);
  FloatVec acc[kRows][kPanelVectors];
  for (int i = 0; i < kRows; ++i) {
    for (int64_t j = 0; j < kPanelVectors; ++j) acc[i][j] = hn::Zero(d);
  }
  for (int64_t p0 = 0; p0 < pairs; p0 += kBf16ChunkPairs) {
    const int64_t p_end = std::min(pairs, p0 + kBf16ChunkPairs);
    FloatVec even[kRows][kPanelVectors], odd[kRows][kPanelVectors];
    for (int i = 0; i < kRows; ++i) {
      for (int64_t j = 0; j < kPanelVectors; ++j) even[i][j] = odd[i][j] = hn::Zero(d);
    }
    for (int64_t p = p0; p < p_end; ++p) {
      FloatVec b_even[kPanelVectors], b_odd[kPanelVectors];
      for (int64_t j = 0; j < vectors; ++j) {
        const auto words = hn::LoadU(du, b_panel + p * kBf16Panel + j * lanes);
        b_even[j] = flush_denormal(hn::BitCast(d, hn::ShiftLeft<16>(words)));
        b_odd[j] = flush_denormal(hn::BitCast(d, hn::And(words, high_half)));
      }
      // a[i][k] of an odd k is read as +0 whatever it holds, as the AMX path's padded copy.
      const uint32_t odd_mask = 2 * p + 1 < k ? 0xffff0000u : 0u;
      for (int i = 0; i < kRows; ++i) {
        const auto pair = hn::Set(du, a[i * lda_words + p]);
        const auto a_even = flush_denormal(hn::BitCast(d, hn::ShiftLeft<16>(pair)));
        const auto a_odd = flush_denormal(hn::BitCast(d, hn::And(pair, hn::Set(du, odd_mask))));
        for (int64_t j = 0; j < vectors; ++j) {
          even[i][j] = flush_denormal(hn::MulAdd(a_even, b_even[j], even[i][j]));
          odd[i][j] = flush_denormal(hn::MulAdd(a_odd, b_odd[j], odd[i][j]));
        }
      }
    }
    // Pairs past k (zero in A's padded copy and B's panel) add +0·+0 to both lane sums: a -0
    // sum becomes +0, nothing else changes.
    const bool padded = p_end - p0 < kBf16ChunkPairs;
    for (int i = 0; i < kRows; ++i) {
      for (int64_t j = 0; j < vectors; ++j) {
        if (padded) {
          even[i][j] = hn::Add(even[i][j], hn::Zero(d));
          odd[i][j] = hn::Add(odd[i][j], hn::Zero(d));
        }
        const auto chunk = flush_denormal(hn::Add(even[i][j], odd[i][j]));
        acc[i][j] = flush_denormal(hn::Add(acc[i][j], chunk));
      }
    }
  }
  const auto v_alpha = hn::Set(d, alpha);
  for (int i = 0; i < kRows; ++i) {
    for (int64_t j = 0; j < vectors; ++j) {
      float* c_vec = c + i * ldc + j * lanes;
      const auto mask = hn::FirstN(d, static_cast<size_t>(std::min(lanes, cols - j * lanes)));
      const auto result = accumulate
                              ? hn::MulAdd(acc[i][j], v_alpha, hn::MaskedLoad(mask, d, c_vec))
                              : hn::Mul(acc[i][j], v_alpha);
      hn::BlendedStore(result, mask, d, c_vec);
    }
  }
}

using Bf16MicroTile = void (*)(int64_t k, float alpha, const uint32_t* a, int64_t lda_words,
                               const uint32_t* b_panel, bool accumulate, float* c, int64_t ldc,
                               int64_t cols);
template <size_t... kRowsMinusOne>
constexpr std::array<Bf16MicroTile, kPortableRows> bf16_portable_rows(
    std::index_sequence<kRowsMinusOne...>) {
  return {&bf16_micro_tile_portable<static_cast<int>(kRowsMinusOne) + 1>...};
}
constexpr std::array<Bf16MicroTile, kPortableRows> kBf16PortableTiles =
    bf16_portable_rows(std::make_index_sequence<kPortableRows>());

// C (m, cols <= kBf16Panel) = alpha · A · B (or +=) for one packed panel of B.
void bf16_panel_portable(int64_t m, int64_t cols, int64_t k, float alpha, const bf16* a,
                         int64_t lda, const uint32_t* panel, bool accumulate, float* c,
                         int64_t ldc) {
  const auto* a_words = reinterpret_cast<const uint32_t*>(a);
  const int64_t lda_words = lda / 2;
  for (int64_t m0 = 0; m0 < m; m0 += kPortableRows) {
    const int64_t rows = std::min<int64_t>(kPortableRows, m - m0);
    kBf16PortableTiles[rows - 1](k, alpha, a_words + m0 * lda_words, lda_words, panel, accumulate,
                                 c + m0 * ldc, ldc, cols);
  }
}

// panel (attention_bf16_panel_pairs(k), kBf16Panel) words of B (k, n) row-major from column
// n0: two rows of bf16 interleaved into 32-bit words, zero past k and n.
void pack_bf16_rows(uint32_t* panel, const bf16* b, int64_t ldb, int64_t k, int64_t n, int64_t n0) {
  const U32Tag du;
  const hn::Rebind<uint16_t, U32Tag> d16;
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(du));
  const int64_t cols = std::min(kBf16Panel, n - n0);
  const int64_t pairs = (k + 1) / 2;
  const auto* bits = reinterpret_cast<const uint16_t*>(b);
  for (int64_t p = 0; p < pairs; ++p) {
    const uint16_t* even = bits + 2 * p * ldb + n0;
    const uint16_t* odd = 2 * p + 1 < k ? even + ldb : nullptr;
    uint32_t* dst = panel + p * kBf16Panel;
    if (cols == kBf16Panel && odd != nullptr) {
      for (int64_t j = 0; j < kBf16Panel; j += lanes) {
        const auto lo = hn::PromoteTo(du, hn::LoadU(d16, even + j));
        const auto hi = hn::PromoteTo(du, hn::LoadU(d16, odd + j));
        hn::StoreU(hn::Or(lo, hn::ShiftLeft<16>(hi)), du, dst + j);
      }
      continue;
    }
    for (int64_t c = 0; c < kBf16Panel; ++c) {
      const uint32_t lo = c < cols ? even[c] : 0u;
      const uint32_t hi = c < cols && odd != nullptr ? odd[c] : 0u;
      dst[c] = lo | hi << 16;
    }
  }
  std::fill(panel + pairs * kBf16Panel, panel + attention_bf16_panel_pairs(k) * kBf16Panel, 0u);
}

// dst = float_to_bf16(src): round half to even on the bits, NaN kept quiet.
void round_to_bf16(bf16* dst, const float* src, int64_t n) {
  const FloatTag d;
  const U32Tag du;
  const hn::RebindToSigned<FloatTag> di;
  const hn::Rebind<uint16_t, FloatTag> d16;
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(d));
  auto* out = reinterpret_cast<uint16_t*>(dst);
  int64_t i = 0;
  for (; i + lanes <= n; i += lanes) {
    const auto bits = hn::BitCast(du, hn::LoadU(d, src + i));
    const auto nan = hn::Gt(hn::And(bits, hn::Set(du, 0x7fffffffu)), hn::Set(du, 0x7f800000u));
    const auto rounding =
        hn::Add(hn::Set(du, 0x7fffu), hn::And(hn::ShiftRight<16>(bits), hn::Set(du, 1u)));
    const auto rounded = hn::ShiftRight<16>(hn::Add(bits, rounding));
    const auto quiet = hn::Or(hn::ShiftRight<16>(bits), hn::Set(du, 0x40u));
    const auto result = hn::BitCast(di, hn::IfThenElse(nan, quiet, rounded));
    hn::StoreU(hn::DemoteTo(d16, result), d16, out + i);
  }
  for (; i < n; ++i) dst[i] = float_to_bf16(src[i]);
}

int64_t vector_lanes() { return static_cast<int64_t>(hn::Lanes(FloatTag())); }
int64_t target_id() { return HWY_TARGET; }

}  // namespace
}  // namespace HWY_NAMESPACE
}  // namespace maxctx::kernels::cpu
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace maxctx::kernels::cpu {

HWY_EXPORT(tile_gemm);
HWY_EXPORT(mask_scores);
HWY_EXPORT(softmax_step);
HWY_EXPORT(softmax_backward);
HWY_EXPORT(vector_lanes);
HWY_EXPORT(gemm_panel);
HWY_EXPORT(target_id);
HWY_EXPORT(bf16_panel_portable);
HWY_EXPORT(pack_bf16_rows);
HWY_EXPORT(round_to_bf16);

namespace {
// The row passes step through kAttentionScoreAlign-float rows a whole vector at a time.
void check_row_alignment() {
  static const bool aligned = kAttentionScoreAlign % HWY_DYNAMIC_DISPATCH(vector_lanes)() == 0;
  MAXCTX_CHECK(aligned, "kAttentionScoreAlign ({}) must be a multiple of the vector lanes ({})",
               kAttentionScoreAlign, HWY_DYNAMIC_DISPATCH(vector_lanes)());
}
}  // namespace

void attention_tile_gemm(int64_t m, int64_t n, int64_t k, float alpha, const float* a, int64_t lda,
                         bool a_transposed, const float* b, int64_t ldb, bool accumulate, float* c,
                         int64_t ldc) {
  // Each thread keeps one panel buffer for B, grown to the deepest product it has seen.
  static thread_local hwy::AlignedFreeUniquePtr<float[]> packed_b;
  static thread_local int64_t capacity = 0;
  const int64_t needed = std::max<int64_t>(1, k) * HWY_DYNAMIC_DISPATCH(gemm_panel)();
  if (needed > capacity) {
    packed_b = hwy::AllocateAligned<float>(static_cast<size_t>(needed));
    capacity = needed;
  }
  HWY_DYNAMIC_DISPATCH(tile_gemm)
  (m, n, k, alpha, a, lda, a_transposed, b, ldb, accumulate, c, ldc, packed_b.get());
}

void attention_mask_scores(float* score, int64_t ld, int64_t rows, int64_t keys, int64_t width,
                           const float* mask, int64_t tokens) {
  check_row_alignment();
  HWY_DYNAMIC_DISPATCH(mask_scores)(score, ld, rows, keys, width, mask, tokens);
}

void attention_softmax_step(float* score, int64_t ld, int64_t rows, int64_t width, float* row_max,
                            float* row_sum, float* acc, int64_t dim) {
  check_row_alignment();
  HWY_DYNAMIC_DISPATCH(softmax_step)(score, ld, rows, width, row_max, row_sum, acc, dim);
}

void attention_softmax_backward(float* prob, float* d_score, int64_t ld, int64_t rows,
                                int64_t width, const float* lse, const float* delta) {
  check_row_alignment();
  HWY_DYNAMIC_DISPATCH(softmax_backward)(prob, d_score, ld, rows, width, lse, delta);
}

namespace {
std::atomic<bool> bf16_force_portable{false};
}  // namespace

void attention_bf16_force_portable(bool portable) { bf16_force_portable = portable; }
bool attention_bf16_amx() { return amx_bf16_usable() && !bf16_force_portable; }

int64_t attention_bf16_panel_pairs(int64_t k) {
  return ((k + 1) / 2 + kBf16ChunkPairs - 1) / kBf16ChunkPairs * kBf16ChunkPairs;
}

int64_t attention_bf16_packed_words(int64_t k, int64_t n) {
  return (n + kBf16Panel - 1) / kBf16Panel * attention_bf16_panel_pairs(k) * kBf16Panel;
}

void attention_pack_bf16_transposed(uint32_t* packed, const bf16* src, int64_t n, int64_t k,
                                    int64_t ld) {
  const int64_t pairs = (k + 1) / 2;
  const int64_t panel_words = attention_bf16_panel_pairs(k) * kBf16Panel;
  const auto* bits = reinterpret_cast<const uint16_t*>(src);
  for (int64_t n0 = 0; n0 < n; n0 += kBf16Panel) {
    uint32_t* panel = packed + n0 / kBf16Panel * panel_words;
    for (int64_t c = 0; c < kBf16Panel; ++c) {
      const uint16_t* row = n0 + c < n ? bits + (n0 + c) * ld : nullptr;
      for (int64_t p = 0; p < pairs; ++p) {
        const uint32_t lo = row != nullptr ? row[2 * p] : 0u;
        const uint32_t hi = row != nullptr && 2 * p + 1 < k ? row[2 * p + 1] : 0u;
        panel[p * kBf16Panel + c] = lo | hi << 16;
      }
    }
    std::fill(panel + pairs * kBf16Panel, panel + panel_words, 0u);
  }
}

void attention_tile_gemm_bf16(int64_t m, int64_t n, int64_t k, float alpha, const bf16* a,
                              int64_t lda, const bf16* b, int64_t ldb, const uint32_t* b_packed,
                              bool accumulate, float* c, int64_t ldc) {
  MAXCTX_CHECK(lda % 2 == 0, "bf16 tile products read A in pairs: lda {} must be even", lda);
  if (m <= 0 || n <= 0) return;
  const int64_t panel_words = attention_bf16_panel_pairs(k) * kBf16Panel;
  // Each thread keeps one B panel, grown to the deepest product it has seen.
  static thread_local hwy::AlignedFreeUniquePtr<uint32_t[]> scratch;
  static thread_local int64_t capacity = 0;
  if (b_packed == nullptr && std::max<int64_t>(1, panel_words) > capacity) {
    capacity = std::max<int64_t>(1, panel_words);
    scratch = hwy::AllocateAligned<uint32_t>(static_cast<size_t>(capacity));
  }
  const bool amx = attention_bf16_amx();
  for (int64_t n0 = 0; n0 < n; n0 += kBf16Panel) {
    const int64_t cols = std::min(kBf16Panel, n - n0);
    const uint32_t* panel = nullptr;
    if (b_packed != nullptr) {
      panel = b_packed + n0 / kBf16Panel * panel_words;
    } else {
      HWY_DYNAMIC_DISPATCH(pack_bf16_rows)(scratch.get(), b, ldb, k, n, n0);
      panel = scratch.get();
    }
    if (amx) {
      amx_panel(m, cols, k, alpha, a, lda, panel, accumulate, c + n0, ldc);
    } else {
      HWY_DYNAMIC_DISPATCH(bf16_panel_portable)
      (m, cols, k, alpha, a, lda, panel, accumulate, c + n0, ldc);
    }
  }
}

void attention_round_to_bf16(bf16* dst, const float* src, int64_t n) {
  HWY_DYNAMIC_DISPATCH(round_to_bf16)(dst, src, n);
}

const char* attention_simd_target() { return hwy::TargetName(HWY_DYNAMIC_DISPATCH(target_id)()); }

}  // namespace maxctx::kernels::cpu
#endif  // HWY_ONCE

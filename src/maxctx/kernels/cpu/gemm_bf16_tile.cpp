// The vector micro-tile of gemm_bf16 (gemm_bf16_tile.h says when it may run). Its operands come
// widened to fp32 (a bf16 is the high half of its fp32) once per A block and B micro-panel, not
// once per tile: widening in the tile cost 13% on Zen 5. Per chunk of 16 pairs, rows of C in
// groups share each load of a B row: per row, two vectors of columns, each with an even and an
// odd accumulator (the even and odd elements of K), so a group of 4 rows keeps 16 independent FMA
// chains in flight. Per element of C the operations and their order are the portable tile's
// exactly: even = fma(a_even, b_even, even) and odd likewise over the chunk's pairs in order, then
// acc = acc + (even + odd); only the flushes are left out. On one Zen 5 core (AVX3_DL) the tile
// runs at ~0.9 of the measured AVX-512 FMA peak with its operands in cache, and gemm_bf16 at
// ~0.87 of OpenBLAS's sgemm on a 2048 × 1024 × 2048 product (4.5× the portable loops).
#include "maxctx/kernels/cpu/gemm_bf16_tile.h"

#include <algorithm>

#ifndef HWY_WANT_AVX3_DL
#define HWY_WANT_AVX3_DL  // Highway 1.0.3 workaround, see elementwise.cpp
#endif
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "maxctx/kernels/cpu/gemm_bf16_tile.cpp"
// clang-format off
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
// clang-format on

HWY_BEFORE_NAMESPACE();
namespace maxctx::kernels::cpu {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;
using DF = hn::ScalableTag<float>;
using DU = hn::RebindToUnsigned<DF>;
using VF = hn::Vec<DF>;

constexpr int64_t kRows = kBf16TileRows;
constexpr int64_t kCols = kBf16TileCols;
constexpr int64_t kPairs = kBf16ChunkPairs;
constexpr int64_t kLanes = static_cast<int64_t>(hn::MaxLanes(DF()));
static_assert(kCols % (2 * kLanes) == 0 && kPairs % kLanes == 0);
// Rows per group: 4 with 32 vector registers (16 accumulators, 4 B vectors, 2 broadcasts; 6 rows
// ran no faster on Zen 5), 2 with 16.
constexpr int64_t kGroupRows = kLanes >= 16 ? 4 : 2;
static_assert(kRows % kGroupRows == 0);

// A chunk of a widened micro-panel (gemm_bf16_tile.h).
struct WideA {
  float even[kRows][kPairs], odd[kRows][kPairs];  // row, pair
};
struct WideB {
  float even[kPairs][kCols], odd[kPairs][kCols];  // pair, column
};
static_assert(sizeof(WideA) == kBf16WideChunkFloats * sizeof(float) &&
              sizeof(WideB) == kBf16WideChunkFloats * sizeof(float));

// `count` packed words from `words` as the fp32 values of their low (even) and high (odd) halves.
HWY_INLINE void Widen(const uint32_t* HWY_RESTRICT words, int64_t count, float* HWY_RESTRICT even,
                      float* HWY_RESTRICT odd) {
  const DF df;
  const DU du;
  const auto high = hn::Set(du, 0xffff0000u);
  for (int64_t i = 0; i < count; i += kLanes) {
    const auto w = hn::LoadU(du, words + i);
    hn::Store(hn::BitCast(df, hn::ShiftLeft<16>(w)), df, even + i);
    hn::Store(hn::BitCast(df, hn::And(w, high)), df, odd + i);
  }
}

void WidenA(int64_t pairs, const uint32_t* HWY_RESTRICT a, float* HWY_RESTRICT wide) {
  auto* chunks = reinterpret_cast<WideA*>(wide);
  for (int64_t q0 = 0; q0 < pairs; q0 += kPairs) {
    WideA& to = chunks[q0 / kPairs];
    for (int64_t r = 0; r < kRows; ++r) Widen(a + r * pairs + q0, kPairs, to.even[r], to.odd[r]);
  }
}

void WidenB(int64_t pairs, const uint32_t* HWY_RESTRICT b, float* HWY_RESTRICT wide) {
  auto* chunks = reinterpret_cast<WideB*>(wide);
  for (int64_t q0 = 0; q0 < pairs; q0 += kPairs) {
    WideB& to = chunks[q0 / kPairs];
    Widen(b + q0 * kCols, kPairs * kCols, &to.even[0][0], &to.odd[0][0]);
  }
}

// v, which the compiler may no longer fold into the instructions that read it: left alone, g++
// 12 reads the B vectors from memory in every FMA, a load per FMA on top of the broadcasts.
HWY_INLINE VF InRegister(VF v) {
#if HWY_ARCH_X86
  asm("" : "+v"(v.raw));
#endif
  return v;
}

// Rows [r0, r0 + kGroupRows) × columns [c0, c0 + 2 · kLanes) of acc += one chunk's sums.
HWY_INLINE void GroupSums(const WideA& a, const WideB& b, int64_t r0, int64_t c0,
                          float* HWY_RESTRICT acc) {
  const DF d;
  VF even[kGroupRows][2], odd[kGroupRows][2];
#pragma GCC unroll 4
  for (int64_t r = 0; r < kGroupRows; ++r) {
    even[r][0] = even[r][1] = odd[r][0] = odd[r][1] = hn::Zero(d);
  }
  for (int64_t q = 0; q < kPairs; ++q) {
    const VF b_even0 = InRegister(hn::Load(d, &b.even[q][c0]));
    const VF b_even1 = InRegister(hn::Load(d, &b.even[q][c0 + kLanes]));
    const VF b_odd0 = InRegister(hn::Load(d, &b.odd[q][c0]));
    const VF b_odd1 = InRegister(hn::Load(d, &b.odd[q][c0 + kLanes]));
#pragma GCC unroll 4
    for (int64_t r = 0; r < kGroupRows; ++r) {
      const VF a_even = hn::Set(d, a.even[r0 + r][q]);
      const VF a_odd = hn::Set(d, a.odd[r0 + r][q]);
      even[r][0] = hn::MulAdd(a_even, b_even0, even[r][0]);
      even[r][1] = hn::MulAdd(a_even, b_even1, even[r][1]);
      odd[r][0] = hn::MulAdd(a_odd, b_odd0, odd[r][0]);
      odd[r][1] = hn::MulAdd(a_odd, b_odd1, odd[r][1]);
    }
  }
#pragma GCC unroll 4
  for (int64_t r = 0; r < kGroupRows; ++r) {
    for (int64_t h = 0; h < 2; ++h) {
      float* to = acc + (r0 + r) * kCols + c0 + h * kLanes;
      hn::Store(hn::Add(hn::Load(d, to), hn::Add(even[r][h], odd[r][h])), d, to);
    }
  }
}

void TileSums(int64_t pairs, const float* HWY_RESTRICT wide_a, const float* HWY_RESTRICT wide_b,
              float* HWY_RESTRICT acc) {
  const DF d;
  for (int64_t e = 0; e < kRows * kCols; e += kLanes) hn::Store(hn::Zero(d), d, acc + e);
  const auto* a = reinterpret_cast<const WideA*>(wide_a);
  const auto* b = reinterpret_cast<const WideB*>(wide_b);
  for (int64_t chunk = 0; chunk < pairs / kPairs; ++chunk) {
    for (int64_t c0 = 0; c0 < kCols; c0 += 2 * kLanes) {
      for (int64_t r0 = 0; r0 < kRows; r0 += kGroupRows) GroupSums(a[chunk], b[chunk], r0, c0, acc);
    }
  }
}

// bf16_exponents in vectors (the scan runs once per A block and B micro-panel of every block).
Bf16Exponents Exponents(const uint32_t* HWY_RESTRICT words, int64_t count) {
  const DU du;
  const auto field = hn::Set(du, 0xffu);
  const auto zero = hn::Zero(du);
  auto low = field, high = zero;  // minimum over the nonzero fields (zeros count as 255), maximum
  int64_t i = 0;
  for (; i + kLanes <= count; i += kLanes) {
    const auto w = hn::LoadU(du, words + i);
    const auto even = hn::And(hn::ShiftRight<7>(w), field);
    const auto odd = hn::And(hn::ShiftRight<23>(w), field);
    low = hn::Min(low, hn::IfThenElse(hn::Eq(even, zero), field, even));
    low = hn::Min(low, hn::IfThenElse(hn::Eq(odd, zero), field, odd));
    high = hn::Max(high, hn::Max(even, odd));
  }
  Bf16Exponents out{hn::GetLane(hn::MinOfLanes(du, low)), hn::GetLane(hn::MaxOfLanes(du, high))};
  for (; i < count; ++i) {
    for (const uint32_t e : {(words[i] >> 7) & 0xffu, (words[i] >> 23) & 0xffu}) {
      if (e != 0) out.min_nonzero = std::min(out.min_nonzero, e);
      out.max = std::max(out.max, e);
    }
  }
  return out;
}

// Without a fused multiply-add (SSE4 and below), MulAdd rounds twice: not the portable tile's.
bool HasFusedMultiplyAdd() { return HWY_NATIVE_FMA != 0; }
const char* TargetName() { return hwy::TargetName(HWY_TARGET); }

}  // namespace HWY_NAMESPACE
}  // namespace maxctx::kernels::cpu
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace maxctx::kernels::cpu {

HWY_EXPORT(TileSums);
HWY_EXPORT(WidenA);
HWY_EXPORT(WidenB);
HWY_EXPORT(Exponents);
HWY_EXPORT(HasFusedMultiplyAdd);
HWY_EXPORT(TargetName);

Bf16Exponents bf16_exponents(const uint32_t* words, int64_t count) {
  return HWY_DYNAMIC_DISPATCH(Exponents)(words, count);
}

bool bf16_vector_tile_available() { return HWY_DYNAMIC_DISPATCH(HasFusedMultiplyAdd)(); }

const char* bf16_vector_tile_target() { return HWY_DYNAMIC_DISPATCH(TargetName)(); }

void bf16_widen_a_panel(int64_t pairs, const uint32_t* a, float* wide) {
  HWY_DYNAMIC_DISPATCH(WidenA)(pairs, a, wide);
}

void bf16_widen_b_panel(int64_t pairs, const uint32_t* b, float* wide) {
  HWY_DYNAMIC_DISPATCH(WidenB)(pairs, b, wide);
}

void bf16_vector_tile_sums(int64_t pairs, const float* wide_a, const float* wide_b, float* acc) {
  HWY_DYNAMIC_DISPATCH(TileSums)(pairs, wide_a, wide_b, acc);
}

}  // namespace maxctx::kernels::cpu
#endif  // HWY_ONCE

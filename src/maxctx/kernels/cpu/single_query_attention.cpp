// Single-query attention: per batch row, blocks of kBlockRows cache rows. A block's visible rows
// are listed first (the mask per row; hidden rows are never read, an empty row may hold NaN).
// Then per kv head: the scores of the listed rows for every query head of its GQA group (the
// query pre-scaled); one online-softmax step over the group's score rows (the flash kernel's,
// attention_tiles.h: running max and sum, accumulators rescaled once per block); and the V rows
// added into the group's accumulators, which stay in registers over the block with each V row
// loaded once for up to four heads. Blocks outer and kv heads inner read each block of K and V
// as one span, and the rows a prefetch distance ahead are requested while a row is computed.
//
// Scores come two ways, chosen by the FMAs a row costs (PackedHeadsPerVector):
//  - head-packed (GQA groups that fill a vector): Lanes / 4 heads share one vector, a K row's
//    four floats broadcast to each 128-bit block, D / 4 FMAs a row for all of them;
//  - per head (MHA, small groups): one vector of partial products per row, sixteen rows' sums
//    gathered into one vector by RowSums.
// Head dims that neither path is compiled for take plain per-row dot products and adds.
//
// An int8 cache (single_query_attention_int8) runs the same code on fp32 rows made per kv head
// and block: the block's visible rows dequantized into an L1-sized scratch (DequantizeRows, the
// prefetch there), so a step reads the int8 bytes and never writes an fp32 copy of the cache.
//
// Work is split over (batch row, kv-head range) items, each computed by one thread in row
// order: the bits never depend on the thread count.
#include "maxctx/kernels/cpu/single_query_attention.h"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <utility>

#include "hwy/cache_control.h"
#include "maxctx/core/buffer.h"
#include "maxctx/core/check.h"
#include "maxctx/kernels/cpu/attention_tiles.h"
#include "maxctx/kernels/cpu/threading.h"

#ifndef MAXCTX_SINGLE_QUERY_ATTENTION_ONCE  // this file is compiled once per SIMD target
#define MAXCTX_SINGLE_QUERY_ATTENTION_ONCE
namespace maxctx::kernels::cpu {
// One batch row's K and V from a kv head on: fp32 or bf16 rows, or int8 codes with a scale per
// row.
struct CacheRows {
  const float* k = nullptr;
  const float* v = nullptr;
  const bf16* k_bf16 = nullptr;  // set for a bf16 cache (then k, v are unused)
  const bf16* v_bf16 = nullptr;
  const int8_t* k_codes = nullptr;  // set for an int8 cache (then k, v are unused)
  const int8_t* v_codes = nullptr;
  const float* k_scale = nullptr;  // (Sk)
  const float* v_scale = nullptr;
  int64_t row_stride = 0;  // elements from one cache row to the next (Hkv · D)
};
}  // namespace maxctx::kernels::cpu
#endif

#ifndef HWY_WANT_AVX3_DL
#define HWY_WANT_AVX3_DL  // Highway 1.0.3 workaround, see elementwise.cpp
#endif
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "maxctx/kernels/cpu/single_query_attention.cpp"
// clang-format off
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
#include "hwy/contrib/math/math-inl.h"
// clang-format on

HWY_BEFORE_NAMESPACE();
namespace maxctx::kernels::cpu {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;
using DF = hn::ScalableTag<float>;
using VF = hn::Vec<DF>;

constexpr int64_t kBlockRows = 128;  // score rows of the softmax pass: kAttentionScoreAlign-aligned
static_assert(kBlockRows % kAttentionScoreAlign == 0);
constexpr int64_t kHeadTile = 4;  // query heads whose V accumulators share a V row load
constexpr float kNegInf = -std::numeric_limits<float>::infinity();
// How far ahead of the row being computed the K and V rows are prefetched, in bytes of cache
// rows (every kv head's): the hardware prefetcher alone leaves the DRAM fetch and the arithmetic
// in series (4 per-layer 32K caches of maxctx-small: 12-16 GB/s without, 25-28 with, against
// 33 for a plain sequential read). Measured best at 128-192 rows of 256 bytes.
constexpr int64_t kPrefetchBytes = 32 << 10;

// The prefetch distance in rows for cache rows of row_stride floats.
int64_t PrefetchRows(int64_t row_stride) {
  return std::max<int64_t>(8, kPrefetchBytes / (row_stride * int64_t{sizeof(float)}));
}

#if HWY_TARGET != HWY_SCALAR
// Lane i of the result = the sum of the lanes of p[i], for N = Lanes(d) vectors. In three folds
// that each halve the vectors while doubling what a lane holds: 32-bit interleave, 64-bit
// interleave (now each 128-bit block holds four rows' block sums), then across blocks. About
// three shuffles or adds per row instead of a full horizontal sum per row.
template <class D>
HWY_INLINE hn::Vec<D> RowSums(D d, const hn::Vec<D>* p) {
  constexpr size_t kN = hn::MaxLanes(D());
  const hn::Repartition<uint64_t, D> du;
  auto fold32 = [&](hn::Vec<D> a, hn::Vec<D> b) {  // per block [a0+a2, b0+b2, a1+a3, b1+b3]
    return hn::Add(hn::InterleaveLower(d, a, b), hn::InterleaveUpper(d, a, b));
  };
  auto fold64 = [&](hn::Vec<D> x, hn::Vec<D> y) {  // per block [a, b, c, e] block sums
    const auto xu = hn::BitCast(du, x), yu = hn::BitCast(du, y);
    return hn::Add(hn::BitCast(d, hn::InterleaveLower(du, xu, yu)),
                   hn::BitCast(d, hn::InterleaveUpper(du, xu, yu)));
  };
  hn::Vec<D> quad[kN / 4];  // quad[k] block j lane i: block j's sum of p[4k + i]
  for (size_t k = 0; k < kN / 4; ++k) {
    quad[k] = fold64(fold32(p[4 * k], p[4 * k + 1]), fold32(p[4 * k + 2], p[4 * k + 3]));
  }
  if constexpr (kN == 4) {
    return quad[0];
  } else {
    // Block k of the result gathers quad[k]'s blocks: adjacent blocks first, then halves.
    auto fold_blocks = [&](hn::Vec<D> even, hn::Vec<D> odd) {
      return hn::Add(hn::OddEvenBlocks(odd, even),
                     hn::OddEvenBlocks(hn::SwapAdjacentBlocks(odd), hn::SwapAdjacentBlocks(even)));
    };
    if constexpr (kN == 8) {
      return fold_blocks(quad[0], quad[1]);
    } else {
      static_assert(kN == 16, "vectors of 4, 8 or 16 floats");
      const auto low = fold_blocks(quad[0], quad[1]), high = fold_blocks(quad[2], quad[3]);
      return hn::Add(hn::ConcatLowerLower(d, high, low), hn::ConcatUpperUpper(d, high, low));
    }
  }
}

// s[i] = q · k_row(rows[i]) for i < n (q already scaled); lanes past n of the last vector are
// written too (the caller overwrites them with −inf). kVecs = D / Lanes is a template argument
// so that the query and one vector of partial sums per row of the group stay in registers.
template <int kVecs>
void ScoresFast(float* s, const float* q, const float* k, const int32_t* rows, int64_t n,
                int64_t row_stride, int64_t ahead) {
  const DF d;
  constexpr int64_t kN = static_cast<int64_t>(hn::MaxLanes(DF()));
  VF qv[kVecs];
  for (int c = 0; c < kVecs; ++c) qv[c] = hn::LoadU(d, q + c * kN);
  auto row_dot = [&](const float* kr) {
    if (ahead != 0) {
      for (int64_t o = 0; o < kVecs * kN; o += 16) hwy::Prefetch(kr + ahead + o);  // 64-byte lines
    }
    VF sum = hn::Mul(qv[0], hn::LoadU(d, kr));
    for (int c = 1; c < kVecs; ++c) sum = hn::MulAdd(qv[c], hn::LoadU(d, kr + c * kN), sum);
    return sum;
  };
  VF p[kN];
  int64_t i0 = 0;
  for (; i0 + kN <= n; i0 += kN) {
    for (int64_t j = 0; j < kN; ++j) p[j] = row_dot(k + rows[i0 + j] * row_stride);
    hn::StoreU(RowSums(d, p), d, s + i0);
  }
  if (i0 < n) {  // past n, repeat the last row
    for (int64_t j = 0; j < kN; ++j) p[j] = row_dot(k + rows[std::min(i0 + j, n - 1)] * row_stride);
    hn::StoreU(RowSums(d, p), d, s + i0);
  }
}

// The GQA group's scores with the heads packed into lanes, P = Lanes / 4 heads per vector:
// lane 4·h + i of packed query vector c holds head h's q[4c + i] (PackQuery). A K row's
// floats [4c, 4c + 4) are loaded into every 128-bit block (LoadDup128), so one FMA per row and c
// advances P heads at once, D / 4 FMAs a row for all of them, and head h's score is the sum of
// block h. Four rows fold into one vector (block h, lane i: row i's score for head h) and P such
// vectors transpose by blocks into one vector of Lanes rows per head: no per-row horizontal sum.
// s (heads, s_stride): rows [0, n) of heads [0, heads), heads <= P; lanes past n of the last
// vector are written too (the caller overwrites them with −inf).
template <class D>
HWY_INLINE hn::Vec<D> Fold4Rows(D d, hn::Vec<D> p0, hn::Vec<D> p1, hn::Vec<D> p2, hn::Vec<D> p3) {
  const hn::Repartition<uint64_t, D> du;
  auto fold32 = [&](hn::Vec<D> a, hn::Vec<D> b) {  // per block [a0+a2, b0+b2, a1+a3, b1+b3]
    return hn::Add(hn::InterleaveLower(d, a, b), hn::InterleaveUpper(d, a, b));
  };
  const auto x = hn::BitCast(du, fold32(p0, p1)), y = hn::BitCast(du, fold32(p2, p3));
  return hn::Add(hn::BitCast(d, hn::InterleaveLower(du, x, y)),
                 hn::BitCast(d, hn::InterleaveUpper(du, x, y)));
}

template <int kQuads>  // kQuads = D / 4
void PackedScoresFast(float* s, int64_t s_stride, int64_t heads, const float* q_packed,
                      const float* k, const int32_t* rows, int64_t n, int64_t row_stride,
                      int64_t ahead) {
  const DF d;
  constexpr size_t kN = hn::MaxLanes(DF());
  constexpr size_t kP = kN / 4;  // heads per vector = rows per fold group = fold groups per vector
  VF qv[kQuads];
  for (int c = 0; c < kQuads; ++c) qv[c] = hn::Load(d, q_packed + c * kN);
  auto row_dot = [&](int64_t i) {  // two chains, so that four rows keep eight FMAs in flight
    const float* kr = k + rows[std::min(i, n - 1)] * row_stride;  // past n, repeat the last row
    if (ahead != 0) {
      for (int o = 0; o < 4 * kQuads; o += 16) hwy::Prefetch(kr + ahead + o);  // 64-byte lines
    }
    VF even = hn::Mul(hn::LoadDup128(d, kr), qv[0]);
    VF odd = hn::Mul(hn::LoadDup128(d, kr + 4), qv[1]);
    for (int c = 2; c + 1 < kQuads; c += 2) {
      even = hn::MulAdd(hn::LoadDup128(d, kr + 4 * c), qv[c], even);
      odd = hn::MulAdd(hn::LoadDup128(d, kr + 4 * c + 4), qv[c + 1], odd);
    }
    if constexpr (kQuads % 2 == 1) {
      even = hn::MulAdd(hn::LoadDup128(d, kr + 4 * (kQuads - 1)), qv[kQuads - 1], even);
    }
    return hn::Add(even, odd);
  };
  for (int64_t i0 = 0; i0 < n; i0 += static_cast<int64_t>(kN)) {
    VF quad[kP];  // quad[j] block h lane i: head h, row i0 + 4j + i
    for (size_t j = 0; j < kP; ++j) {
      const int64_t i = i0 + static_cast<int64_t>(4 * j);
      quad[j] = Fold4Rows(d, row_dot(i), row_dot(i + 1), row_dot(i + 2), row_dot(i + 3));
    }
    VF head[kP];  // head[h] block j = quad[j] block h: head h's rows i0 .. i0 + kN
    if constexpr (kP == 1) {
      head[0] = quad[0];
    } else if constexpr (kP == 2) {
      head[0] = hn::ConcatLowerLower(d, quad[1], quad[0]);
      head[1] = hn::ConcatUpperUpper(d, quad[1], quad[0]);
    } else {
      static_assert(kP == 4 && kQuads > 0, "vectors of 4, 8 or 16 floats");
      // Pairs first (t0 = [q0.b0, q1.b0, q0.b2, q1.b2], t1 = [q0.b1, q1.b1, q0.b3, q1.b3]),
      // then halves.
      const VF t0 = hn::OddEvenBlocks(hn::SwapAdjacentBlocks(quad[1]), quad[0]);
      const VF t1 = hn::OddEvenBlocks(quad[1], hn::SwapAdjacentBlocks(quad[0]));
      const VF t2 = hn::OddEvenBlocks(hn::SwapAdjacentBlocks(quad[3]), quad[2]);
      const VF t3 = hn::OddEvenBlocks(quad[3], hn::SwapAdjacentBlocks(quad[2]));
      head[0] = hn::ConcatLowerLower(d, t2, t0);
      head[1] = hn::ConcatLowerLower(d, t3, t1);
      head[2] = hn::ConcatUpperUpper(d, t2, t0);
      head[3] = hn::ConcatUpperUpper(d, t3, t1);
    }
    for (int64_t h = 0; h < heads; ++h) hn::StoreU(head[h], d, s + h * s_stride + i0);
  }
}

// PackedScoresFast for D / 4 quads, if quads is one of kQuads; false otherwise.
template <int... kQuads>
bool PackedScoresFor(std::integer_sequence<int, kQuads...>, int64_t quads, float* s,
                     int64_t s_stride, int64_t heads, const float* q_packed, const float* k,
                     const int32_t* rows, int64_t n, int64_t row_stride, int64_t ahead) {
  return ((quads == kQuads &&
           (PackedScoresFast<kQuads>(s, s_stride, heads, q_packed, k, rows, n, row_stride, ahead),
            true)) ||
          ...);
}

// ScoresFast for `vecs` vectors per head, if vecs is one of kVecs; false otherwise.
template <int... kVecs>
bool ScoresFastFor(std::integer_sequence<int, kVecs...>, int64_t vecs, float* s, const float* q,
                   const float* k, const int32_t* rows, int64_t n, int64_t row_stride,
                   int64_t ahead) {
  return ((vecs == kVecs && (ScoresFast<kVecs>(s, q, k, rows, n, row_stride, ahead), true)) || ...);
}

// acc (kHeads, D) += Σ_i w[t · kBlockRows + i] · v_row(rows[i]): two vectors of every head's
// accumulator stay in registers over the block's rows, each V row loaded once for the heads.
template <int kHeads>
void AccumulateFast(float* acc, const float* w, const float* v, const int32_t* rows, int64_t n,
                    int64_t D, int64_t row_stride, int64_t ahead) {
  const DF d;
  const int64_t N = static_cast<int64_t>(hn::Lanes(d));
  for (int64_t c = 0; c < D; c += 2 * N) {
    const bool pair = c + N < D;
    VF a0[kHeads], a1[kHeads];
    for (int t = 0; t < kHeads; ++t) {
      a0[t] = hn::LoadU(d, acc + t * D + c);
      a1[t] = pair ? hn::LoadU(d, acc + t * D + c + N) : hn::Zero(d);
    }
    if (pair) {
      for (int64_t i = 0; i < n; ++i) {
        const float* vr = v + rows[i] * row_stride + c;
        if (ahead != 0) {
          hwy::Prefetch(vr + ahead);
          hwy::Prefetch(vr + ahead + N);
        }
        const VF v0 = hn::LoadU(d, vr), v1 = hn::LoadU(d, vr + N);
        for (int t = 0; t < kHeads; ++t) {
          const VF wt = hn::Set(d, w[t * kBlockRows + i]);
          a0[t] = hn::MulAdd(wt, v0, a0[t]);
          a1[t] = hn::MulAdd(wt, v1, a1[t]);
        }
      }
    } else {
      for (int64_t i = 0; i < n; ++i) {
        if (ahead != 0) hwy::Prefetch(v + rows[i] * row_stride + c + ahead);
        const VF v0 = hn::LoadU(d, v + rows[i] * row_stride + c);
        for (int t = 0; t < kHeads; ++t)
          a0[t] = hn::MulAdd(hn::Set(d, w[t * kBlockRows + i]), v0, a0[t]);
      }
    }
    for (int t = 0; t < kHeads; ++t) {
      hn::StoreU(a0[t], d, acc + t * D + c);
      if (pair) hn::StoreU(a1[t], d, acc + t * D + c + N);
    }
  }
}
#endif  // HWY_TARGET != HWY_SCALAR

// Any head dim: one dot product per row and head, one scaled add per row and head.
float Dot(const float* a, const float* b, int64_t n) {
  const DF d;
  const int64_t N = static_cast<int64_t>(hn::Lanes(d));
  auto sum = hn::Zero(d);
  int64_t i = 0;
  for (; i + N <= n; i += N) sum = hn::MulAdd(hn::LoadU(d, a + i), hn::LoadU(d, b + i), sum);
  float total = hn::GetLane(hn::SumOfLanes(d, sum));
  for (; i < n; ++i) total += a[i] * b[i];
  return total;
}

void ScoresAnyDim(float* s, const float* q, const float* k, const int32_t* rows, int64_t n,
                  int64_t D, int64_t row_stride) {
  for (int64_t i = 0; i < n; ++i) s[i] = Dot(q, k + rows[i] * row_stride, D);
}

void AccumulateAnyDim(float* acc, const float* w, const float* v, const int32_t* rows, int64_t n,
                      int64_t heads, int64_t D, int64_t row_stride) {
  for (int64_t i = 0; i < n; ++i) {
    const float* vr = v + rows[i] * row_stride;
    for (int64_t t = 0; t < heads; ++t) {
      const float wt = w[t * kBlockRows + i];
      float* a = acc + t * D;
      for (int64_t e = 0; e < D; ++e) a[e] += wt * vr[e];
    }
  }
}

// s[0, n) = q · k_row(rows[i]): the vector path when D is whole vectors of a count it has.
// ahead: the prefetch distance in floats, 0 for none (rows already in cache).
void Scores(float* s, const float* q, const float* k, const int32_t* rows, int64_t n, int64_t D,
            int64_t row_stride, int64_t ahead) {
#if HWY_TARGET != HWY_SCALAR
  const int64_t N = static_cast<int64_t>(hn::Lanes(DF()));
  using Counts = std::integer_sequence<int, 1, 2, 3, 4, 6, 8, 16>;  // D = 16..256 at 4..16 lanes
  if (D % N == 0 && ScoresFastFor(Counts(), D / N, s, q, k, rows, n, row_stride, ahead)) return;
#else
  (void)ahead;
#endif
  ScoresAnyDim(s, q, k, rows, n, D, row_stride);
}

// The head dims PackedScoresFast is compiled for, as D / 4: D = 16, 24, 32, 48, 64, 96, 128.
using PackedQuads = std::integer_sequence<int, 4, 6, 8, 12, 16, 24, 32>;

template <int... kQuads>
constexpr bool HasQuads(std::integer_sequence<int, kQuads...>, int64_t quads) {
  return ((quads == kQuads) || ...);
}

// Query heads per packed score vector (Lanes / 4) where the packed scores pay for a group of G
// heads of dimension D, else 0: ceil(G / P) vectors of D / 4 FMAs a row, against G heads of
// D / Lanes FMAs and about three fold operations a row each (so MHA keeps the per-head path).
int64_t PackedHeadsPerVector(int64_t G, int64_t D) {
#if HWY_TARGET == HWY_SCALAR
  (void)G;
  (void)D;
  return 0;
#else
  const int64_t N = static_cast<int64_t>(hn::Lanes(DF())), P = N / 4;
  if (D % 4 != 0 || !HasQuads(PackedQuads(), D / 4)) return 0;
  const int64_t packed = (G + P - 1) / P * (D / 4 + 1);
  const int64_t per_head = D % N == 0 ? G * (D / N + 3) : G * D;  // else: plain dot products
  return packed <= per_head ? P : 0;
#endif
}

// q_packed (ceil(G / P), D / 4, Lanes): lane 4·h + i of vector (hv, c) = q[(hv·P + h)·D + 4c + i],
// zero past the group's G heads.
void PackQuery(float* q_packed, const float* q, int64_t G, int64_t D, int64_t P) {
  const int64_t N = 4 * P, quads = D / 4;
  for (int64_t hv = 0; hv < (G + P - 1) / P; ++hv) {
    for (int64_t c = 0; c < quads; ++c) {
      float* lanes = q_packed + (hv * quads + c) * N;
      for (int64_t h = 0; h < P; ++h) {
        const int64_t g = hv * P + h;
        for (int64_t i = 0; i < 4; ++i) lanes[4 * h + i] = g < G ? q[g * D + 4 * c + i] : 0.0f;
      }
    }
  }
}

// s (G, kBlockRows) = scores of the group's G heads (q (G, D), packed as PackQuery when P > 0)
// for rows[0, n) of k.
void GroupScores(float* s, const float* q, const float* q_packed, const float* k,
                 const int32_t* rows, int64_t n, int64_t G, int64_t D, int64_t P,
                 int64_t row_stride, int64_t ahead) {
#if HWY_TARGET != HWY_SCALAR
  if (P > 0) {
    const int64_t quads = D / 4;
    for (int64_t hv = 0; hv * P < G; ++hv) {
      PackedScoresFor(PackedQuads(), quads, s + hv * P * kBlockRows, kBlockRows,
                      std::min(P, G - hv * P), q_packed + hv * quads * 4 * P, k, rows, n,
                      row_stride, ahead);
    }
    return;
  }
#endif
  (void)q_packed;
  (void)P;
  for (int64_t g = 0; g < G; ++g) {
    Scores(s + g * kBlockRows, q + g * D, k, rows, n, D, row_stride, ahead);
  }
}

// acc (heads, D) += Σ_i w[t · kBlockRows + i] · v_row(rows[i]), heads ≤ kHeadTile.
void Accumulate(float* acc, const float* w, const float* v, const int32_t* rows, int64_t n,
                int64_t heads, int64_t D, int64_t row_stride, int64_t ahead) {
#if HWY_TARGET != HWY_SCALAR
  if (D % static_cast<int64_t>(hn::Lanes(DF())) == 0) {
    static_assert(kHeadTile == 4, "one AccumulateFast per tile size");
    if (heads == 4) return AccumulateFast<4>(acc, w, v, rows, n, D, row_stride, ahead);
    if (heads == 3) return AccumulateFast<3>(acc, w, v, rows, n, D, row_stride, ahead);
    if (heads == 2) return AccumulateFast<2>(acc, w, v, rows, n, D, row_stride, ahead);
    return AccumulateFast<1>(acc, w, v, rows, n, D, row_stride, ahead);
  }
#else
  (void)ahead;
#endif
  AccumulateAnyDim(acc, w, v, rows, n, heads, D, row_stride);
}

// out (n, D) = float(q_row(rows[i])) · scale[rows[i]] for one kv head's codes (row_stride bytes
// apart), as dequantize_rows_int8 computes it (the same bits), prefetching the codes of the rows
// PrefetchRows ahead.
void DequantizeRows(float* out, const int8_t* codes, const float* scale, const int32_t* rows,
                    int64_t n, int64_t D, int64_t row_stride) {
  const DF d;
  const hn::Rebind<int32_t, DF> d32;
  const hn::Rebind<int8_t, DF> d8;
  const int64_t N = static_cast<int64_t>(hn::Lanes(d));
  const int64_t ahead = PrefetchRows(row_stride) * row_stride;
  for (int64_t i = 0; i < n; ++i) {
    const int8_t* qr = codes + rows[i] * row_stride;
    for (int64_t o = 0; o < D; o += 64) hwy::Prefetch(qr + ahead + o);  // 64-byte lines
    const float s = scale[rows[i]];
    const VF vs = hn::Set(d, s);
    float* x = out + i * D;
    int64_t e = 0;
    for (; e + N <= D; e += N) {
      const VF codes_f = hn::ConvertTo(d, hn::PromoteTo(d32, hn::LoadU(d8, qr + e)));
      hn::StoreU(hn::Mul(codes_f, vs), d, x + e);
    }
    for (; e < D; ++e) x[e] = float(qr[e]) * s;
  }
}

// out (n, D) = the bf16 rows rows[i] of one kv head (row_stride elements apart) widened to fp32
// (exact), prefetching the rows PrefetchRows ahead (in bytes of fp32 rows: twice as many rows).
void WidenRows(float* out, const bf16* rows_bf16, const int32_t* rows, int64_t n, int64_t D,
               int64_t row_stride) {
  const DF d;
  const hn::RebindToUnsigned<DF> du;
  const hn::Rebind<uint16_t, DF> d16;
  const int64_t N = static_cast<int64_t>(hn::Lanes(d));
  const int64_t ahead = PrefetchRows(row_stride) * row_stride;
  const auto* bits = reinterpret_cast<const uint16_t*>(rows_bf16);
  for (int64_t i = 0; i < n; ++i) {
    const uint16_t* row = bits + rows[i] * row_stride;
    for (int64_t o = 0; o < D; o += 32) hwy::Prefetch(row + ahead + o);  // 64-byte lines
    float* x = out + i * D;
    int64_t e = 0;
    for (; e + N <= D; e += N) {
      const auto wide = hn::ShiftLeft<16>(hn::PromoteTo(du, hn::LoadU(d16, row + e)));
      hn::StoreU(hn::BitCast(d, wide), d, x + e);
    }
    for (; e < D; ++e) x[e] = bf16_to_float(rows_bf16[rows[i] * row_stride + e]);
  }
}

// One batch row, kv heads [h0, h0 + heads): blocks of rows outer and kv heads inner, so the
// block's K and V rows are read as one contiguous span (each cache row holds every kv head).
// q, out: the row's (Hq, D); cache: the row's K and V, (Sk, Hkv, D) from kv head h0. An int8
// cache's rows are dequantized (a bf16 cache's widened) per kv head and block into an L1-sized
// scratch as they are used.
void SingleQueryRow(float* out, float* lse, const float* q, const CacheRows& cache, int32_t q_pos,
                    int32_t q_seg, const int32_t* k_pos, const int32_t* k_seg, int64_t Sk,
                    int64_t heads, int64_t G, int64_t D, float scale, int32_t window) {
  const int64_t row_stride = cache.row_stride;
  const bool int8 = cache.k_codes != nullptr;
  const bool staged = int8 || cache.k_bf16 != nullptr;  // rows copied to fp32 scratch per block
  const int64_t HG = heads * G;  // query heads of this item, contiguous in q, out and lse
  // One kv head's scores, then weights, (G, kBlockRows) in rows aligned for the softmax pass;
  // per query head the running max and sum, the accumulator and the scaled query (D each).
  // The packed query of each kv head first: whole vectors, aligned.
  const int64_t P = PackedHeadsPerVector(G, D);
  const int64_t packed_per_head = P > 0 ? ((G + P - 1) / P * D * P + kAttentionScoreAlign - 1) /
                                              kAttentionScoreAlign * kAttentionScoreAlign
                                        : 0;
  const int64_t dequantized = staged ? 2 * kBlockRows * D : 0;  // one kv head's K, V block rows
  const size_t need = static_cast<size_t>(heads * packed_per_head + G * kBlockRows + 2 * HG +
                                          2 * HG * D + dequantized) *
                      sizeof(float);
  thread_local AlignedBuffer scratch;
  if (scratch.size() < need) scratch = AlignedBuffer(need);
  float* q_packed = reinterpret_cast<float*>(scratch.data());
  float* scores = q_packed + heads * packed_per_head;
  float* running_max = scores + G * kBlockRows;
  float* running_sum = running_max + HG;
  float* acc = running_sum + HG;
  float* q_scaled = acc + HG * D;
  float* k_block = q_scaled + HG * D;  // int8 and bf16 only: (n, D) each
  float* v_block = k_block + kBlockRows * D;
  std::fill(running_max, running_max + HG, kNegInf);
  std::fill(running_sum, running_sum + HG, 0.0f);
  std::fill(acc, acc + HG * D, 0.0f);
  for (int64_t e = 0; e < HG * D; ++e) q_scaled[e] = q[e] * scale;
  if (P > 0) {
    for (int64_t h = 0; h < heads; ++h) {
      PackQuery(q_packed + h * packed_per_head, q_scaled + h * G * D, G, D, P);
    }
  }
  int32_t rows[kBlockRows];        // the block's visible rows: hidden rows are never read
  int32_t block_rows[kBlockRows];  // int8 and bf16: rows 0..n of the staged block
  for (int64_t i = 0; i < kBlockRows; ++i) block_rows[i] = static_cast<int32_t>(i);
  const int64_t ahead = staged ? 0 : PrefetchRows(row_stride) * row_stride;
  for (int64_t r0 = 0; r0 < Sk; r0 += kBlockRows) {
    const int64_t block = std::min(kBlockRows, Sk - r0);
    int64_t n = 0;
    for (int64_t r = r0; r < r0 + block; ++r) {
      if (attention_visible(q_pos, q_seg, k_pos[r], k_seg[r], window)) {
        rows[n++] = static_cast<int32_t>(r);
      }
    }
    if (n == 0) continue;
    const int64_t width =
        (n + kAttentionScoreAlign - 1) / kAttentionScoreAlign * kAttentionScoreAlign;
    for (int64_t h = 0; h < heads; ++h) {
      if (int8) {
        DequantizeRows(k_block, cache.k_codes + h * D, cache.k_scale, rows, n, D, row_stride);
        DequantizeRows(v_block, cache.v_codes + h * D, cache.v_scale, rows, n, D, row_stride);
      } else if (staged) {
        WidenRows(k_block, cache.k_bf16 + h * D, rows, n, D, row_stride);
        WidenRows(v_block, cache.v_bf16 + h * D, rows, n, D, row_stride);
      }
      // fp32 rows are read in place; int8 and bf16 ones from the staged block, its rows 0..n.
      const float* kh = staged ? k_block : cache.k + h * D;
      const float* vh = staged ? v_block : cache.v + h * D;
      const int32_t* kv_rows = staged ? block_rows : rows;
      const int64_t kv_stride = staged ? D : row_stride;
      GroupScores(scores, q_scaled + h * G * D, q_packed + h * packed_per_head, kh, kv_rows, n, G,
                  D, P, kv_stride, ahead);
      for (int64_t g = 0; g < G; ++g) {
        std::fill(scores + g * kBlockRows + n, scores + g * kBlockRows + width, kNegInf);
      }
      // The flash kernel's online-softmax step over the group's G rows: running max and sum
      // updated, accumulators rescaled when the max grows, scores turned into weights.
      attention_softmax_step(scores, kBlockRows, G, width, running_max + h * G, running_sum + h * G,
                             acc + h * G * D, D);
      for (int64_t g0 = 0; g0 < G; g0 += kHeadTile) {
        Accumulate(acc + (h * G + g0) * D, scores + g0 * kBlockRows, vh, kv_rows, n,
                   std::min(kHeadTile, G - g0), D, kv_stride, ahead);
      }
    }
  }
  for (int64_t head = 0; head < HG; ++head) {
    float* o = out + head * D;
    if (running_sum[head] == 0.0f) {
      std::fill(o, o + D, 0.0f);
      lse[head] = kNegInf;
      continue;
    }
    const float inv = 1.0f / running_sum[head];
    for (int64_t e = 0; e < D; ++e) o[e] = acc[head * D + e] * inv;
    lse[head] = running_max[head] + std::log(running_sum[head]);
  }
}

int64_t TargetId() { return HWY_TARGET; }

}  // namespace HWY_NAMESPACE
}  // namespace maxctx::kernels::cpu
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace maxctx::kernels::cpu {

HWY_EXPORT(SingleQueryRow);
HWY_EXPORT(TargetId);

const char* single_query_attention_simd_target() {
  return hwy::TargetName(HWY_DYNAMIC_DISPATCH(TargetId)());
}

namespace {

// Items are (batch row, range of kv heads): whole rows when there are enough batch rows for the
// threads, else heads split so every thread has work. A head's arithmetic is the same in any
// item, so the bits never depend on the thread count. cache: the whole batch's, (B, Sk, Hkv, D).
void run_items(float* out, float* lse, const float* q, const int32_t* q_pos, const int32_t* q_seg,
               const int32_t* k_pos, const int32_t* k_seg, const AttentionParams& p,
               const CacheRows& cache) {
  check_attention_params(p);
  MAXCTX_CHECK(p.seq_q == 1, "single_query_attention takes one query row per batch row, got {}",
               p.seq_q);
  const int64_t B = p.batch, Sk = p.seq_k, Hq = p.heads_q, Hkv = p.heads_kv, D = p.head_dim;
  const int64_t G = p.group_size();
  const float scale = static_cast<float>(p.softmax_scale());
  const int64_t threads = omp_get_max_threads();
  const int64_t splits = std::clamp<int64_t>((threads + B - 1) / B, 1, Hkv);
  const int64_t heads_per_item = (Hkv + splits - 1) / splits;
  const int64_t items_per_row = (Hkv + heads_per_item - 1) / heads_per_item;
  auto& row = HWY_DYNAMIC_DISPATCH(SingleQueryRow);
  auto rows_of = [&](int64_t b, int64_t h0) {  // batch row b's cache from kv head h0
    CacheRows r = cache;
    const int64_t at = (b * Sk * Hkv + h0) * D;
    if (r.k_codes != nullptr) {
      r.k_codes += at;
      r.v_codes += at;
      r.k_scale += b * Sk;
      r.v_scale += b * Sk;
    } else if (r.k_bf16 != nullptr) {
      r.k_bf16 += at;
      r.v_bf16 += at;
    } else {
      r.k += at;
      r.v += at;
    }
    return r;
  };
  parallel_for(B * items_per_row, items_per_task(2 * Sk * heads_per_item * D),
               [&](int64_t begin, int64_t end) {
                 for (int64_t item = begin; item < end; ++item) {
                   const int64_t b = item / items_per_row;
                   const int64_t h0 = item % items_per_row * heads_per_item;
                   const int64_t heads = std::min(heads_per_item, Hkv - h0);
                   const int64_t q0 = (b * Hq + h0 * G) * D;
                   // lse is (B, Hq, Sq = 1): the item's heads are contiguous there too.
                   row(out + q0, lse + b * Hq + h0 * G, q + q0, rows_of(b, h0), q_pos[b], q_seg[b],
                       k_pos + b * Sk, k_seg + b * Sk, Sk, heads, G, D, scale, p.sliding_window);
                 }
               });
}

}  // namespace

void single_query_attention(float* out, float* lse, const float* q, const float* k, const float* v,
                            const int32_t* q_pos, const int32_t* q_seg, const int32_t* k_pos,
                            const int32_t* k_seg, const AttentionParams& p) {
  CacheRows cache;
  cache.k = k;
  cache.v = v;
  cache.row_stride = p.heads_kv * p.head_dim;
  run_items(out, lse, q, q_pos, q_seg, k_pos, k_seg, p, cache);
}

void single_query_attention(float* out, float* lse, const float* q, const bf16* k, const bf16* v,
                            const int32_t* q_pos, const int32_t* q_seg, const int32_t* k_pos,
                            const int32_t* k_seg, const AttentionParams& p) {
  CacheRows cache;
  cache.k_bf16 = k;
  cache.v_bf16 = v;
  cache.row_stride = p.heads_kv * p.head_dim;
  run_items(out, lse, q, q_pos, q_seg, k_pos, k_seg, p, cache);
}

void single_query_attention_int8(float* out, float* lse, const float* q, const int8_t* k,
                                 const float* k_scale, const int8_t* v, const float* v_scale,
                                 const int32_t* q_pos, const int32_t* q_seg, const int32_t* k_pos,
                                 const int32_t* k_seg, const AttentionParams& p) {
  CacheRows cache;
  cache.k_codes = k;
  cache.v_codes = v;
  cache.k_scale = k_scale;
  cache.v_scale = v_scale;
  cache.row_stride = p.heads_kv * p.head_dim;
  run_items(out, lse, q, q_pos, q_seg, k_pos, k_seg, p, cache);
}

}  // namespace maxctx::kernels::cpu
#endif  // HWY_ONCE

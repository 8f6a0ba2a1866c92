// SGEMM in the Goto/BLIS shape (see sgemm.h), one copy of the SIMD parts per Highway target.
//
// Loops, outermost first: jc over N in steps of kBlockN (the packed B panel, kc × kBlockN, lives
// in L3), pc over K in steps of kBlockK, ic over M in blocks of at most kBlockM rows (the packed
// A block lives in L2), jr over the B panel's micro-panels (kc × kTileCols, kept in L1 while ir
// walks down the A block's micro-panels, kTileRows × kc, streamed from L2). Packing turns every
// transpose into the same layout, so one micro-kernel serves all four products; panels are
// zero-padded, so the micro-kernel always runs a whole tile and only its store is masked.
//
// The OpenMP driver lives outside the per-target code (target attributes and outlined parallel
// bodies do not mix) and only calls dispatched functions that each do a packing or a block of
// tiles. Only Highway vectors and plain arrays live in the per-target code: g++ 12.2 miscompiles
// constant std::vector initialisers under AVX-512 (see attention_tiles.cpp).
#include "maxctx/kernels/cpu/sgemm.h"

#include <omp.h>

#include <algorithm>
#include <cstddef>

#include "hwy/aligned_allocator.h"
#include "hwy/cache_control.h"
#include "maxctx/core/check.h"
#include "maxctx/kernels/cpu/gemm_tasks.h"

#ifndef MAXCTX_KERNELS_CPU_SGEMM_SHARED_
#define MAXCTX_KERNELS_CPU_SGEMM_SHARED_
namespace maxctx::kernels::cpu {
namespace {

// One target's tile and cache-block sizes. block_m is a multiple of tile_rows, block_n of
// tile_cols, so that every block starts on the same global grid of tiles.
struct Blocking {
  int64_t tile_rows;  // MR: rows of C per micro-tile (broadcasts of A)
  int64_t tile_cols;  // NR: columns of C per micro-tile (vectors of B)
  int64_t block_m;    // MC
  int64_t block_k;    // KC
  int64_t block_n;    // NC
};

}  // namespace
}  // namespace maxctx::kernels::cpu
#endif  // MAXCTX_KERNELS_CPU_SGEMM_SHARED_

// Highway 1.0.3 drops AVX3_DL from its dynamic targets unless asked (see elementwise.cpp).
#ifndef HWY_WANT_AVX3_DL
#define HWY_WANT_AVX3_DL
#endif
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "maxctx/kernels/cpu/sgemm.cpp"
// foreach_target.h must precede highway.h.
// clang-format off
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
// clang-format on

HWY_BEFORE_NAMESPACE();
namespace maxctx::kernels::cpu {
namespace HWY_NAMESPACE {
// Internal linkage: other kernels' per-target functions share these namespaces.
namespace {
namespace hn = hwy::HWY_NAMESPACE;
using FloatTag = hn::ScalableTag<float>;
using FloatVec = hn::Vec<FloatTag>;

constexpr int64_t kLanes = static_cast<int64_t>(hn::MaxLanes(FloatTag()));
constexpr int kTileVectors = 2;
constexpr int64_t kTileCols = kTileVectors * kLanes;
#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX3
// 32 vector registers: 8 × 2 accumulators + 2 vectors of B + 1 broadcast of A. Per step of K:
// 16 FMAs (8 cycles on two 512-bit pipes) for 2 loads and 8 broadcasts, and the 16 independent
// chains cover the FMA latency (4 cycles) × 2 pipes twice. 12 and 14 rows (24 and 28
// accumulators) measured no faster at 1024³ (12 rows: about 5% slower), so the smaller tile
// wins: less zero padding at the M edge and a smaller A micro-panel.
constexpr int kTileRows = 8;
#else
// 16 vector registers: 6 × 2 accumulators + 2 + 1 = 15.
constexpr int kTileRows = 6;
#endif

// Cache blocks for a Zen 5 core (48 KiB L1d, 1 MiB L2, 32 MiB shared L3), in floats:
//  - kBlockK = 256: the B micro-panel, 256 × 32 × 4 B = 32 KiB, stays in L1 beside the A
//    micro-panel being streamed (8 × 256 × 4 B = 8 KiB).
//  - kBlockM = 160 (20 tiles of 8): the A block, 160 × 256 × 4 B = 160 KiB, a sixth of L2,
//    leaves room for the B micro-panels passing through and for C.
//  - kBlockN = 4096: the packed B panel, 256 × 4096 × 4 B = 4 MiB, a slice of L3.
// Measured at 1024³ on a loaded machine: K blocks of 192 to 512 and M blocks of 96 to 240 rows
// are all within the run-to-run noise (about 5%) of this choice.
constexpr int64_t kBlockK = 256;
constexpr int64_t kBlockM = 20 * kTileRows;
constexpr int64_t kBlockN = 4096 / kTileCols * kTileCols;

Blocking blocking() { return {kTileRows, kTileCols, kBlockM, kBlockK, kBlockN}; }

// ---------------------------------------------------------------- packing
// A packed panel of width kWidth holds `depth` groups of kWidth floats: dst[p·kWidth + i] =
// src(i, p) for i < live, 0 for live <= i < kWidth.

// src(i, p) = src[p·ld + i] for i < live, over as many panels as live needs (panel s holds
// columns s·kWidth ...). Sixteen source rows at a time are dealt out to every panel: the rows'
// lines stay in L1 while each panel gets 16 whole groups in a row. Walking one panel's 256 rows
// at a time touched a new page per row when ld was large; walking one row across all panels
// spread single groups over panels 8-32 KiB apart, which share L1 sets and evicted each other
// half-written (A packing was then 17% of d_weight 1536×512×2048).
template <int64_t kWidth>
void pack_contiguous(const float* src, int64_t ld, int64_t live, int64_t depth, float* dst) {
  // Vectors no wider than a group: an 8-float group of A is one unmasked 256-bit copy.
  const hn::CappedTag<float, kWidth> d;
  constexpr int64_t kGroupLanes = static_cast<int64_t>(hn::MaxLanes(d));
  constexpr int64_t kRowsAtOnce = 16;
  const int64_t panels = (live + kWidth - 1) / kWidth;
  for (int64_t p0 = 0; p0 < depth; p0 += kRowsAtOnce) {
    const int64_t p_end = std::min(depth, p0 + kRowsAtOnce);
    for (int64_t s = 0; s < panels; ++s) {
      const int64_t panel_live = std::min(kWidth, live - s * kWidth);
      for (int64_t p = p0; p < p_end; ++p) {
        const float* from = src + p * ld + s * kWidth;
        float* to = dst + s * kWidth * depth + p * kWidth;
#pragma GCC unroll 4
        for (int64_t i0 = 0; i0 < kWidth; i0 += kGroupLanes) {
          const int64_t loaded = std::clamp<int64_t>(panel_live - i0, 0, kGroupLanes);
          const auto v =
              loaded == kGroupLanes
                  ? hn::LoadU(d, from + i0)
                  : hn::MaskedLoad(hn::FirstN(d, static_cast<size_t>(loaded)), d, from + i0);
          if (kWidth - i0 >= kGroupLanes) {
            hn::StoreU(v, d, to + i0);
          } else {
            hn::BlendedStore(v, hn::FirstN(d, static_cast<size_t>(kWidth - i0)), d, to + i0);
          }
        }
      }
    }
  }
}

#if HWY_MAX_BYTES >= 32 && HWY_TARGET != HWY_EMU128 && HWY_TARGET != HWY_SCALAR
using Tag8 = hn::FixedTag<float, 8>;
using Vec8 = hn::Vec<Tag8>;

// rows[q] holds src(i0 + q, p0 .. p0 + 8); on return rows[t] holds src(i0 .. i0 + 8, p0 + t).
void transpose_8x8(Vec8 rows[8]) {
  const Tag8 d;
  const hn::Repartition<double, Tag8> dd;
  Vec8 pairs[8];  // pairs of rows interleaved: lanes (2q, 2q + 1) of each 128-bit block
  for (int q = 0; q < 4; ++q) {
    pairs[2 * q] = hn::InterleaveLower(d, rows[2 * q], rows[2 * q + 1]);
    pairs[2 * q + 1] = hn::InterleaveUpper(d, rows[2 * q], rows[2 * q + 1]);
  }
  Vec8 quads[8];  // quads[4h + t]: rows 4h .. 4h + 3 at p0 + t (low block) and p0 + t + 4 (high)
  for (int h = 0; h < 2; ++h) {
    for (int s = 0; s < 2; ++s) {
      const auto lo = hn::BitCast(dd, pairs[4 * h + s]);
      const auto hi = hn::BitCast(dd, pairs[4 * h + 2 + s]);
      quads[4 * h + 2 * s] = hn::BitCast(d, hn::InterleaveLower(dd, lo, hi));
      quads[4 * h + 2 * s + 1] = hn::BitCast(d, hn::InterleaveUpper(dd, lo, hi));
    }
  }
  for (int t = 0; t < 4; ++t) {
    rows[t] = hn::ConcatLowerLower(d, quads[4 + t], quads[t]);
    rows[t + 4] = hn::ConcatUpperUpper(d, quads[4 + t], quads[t]);
  }
}

// src(i, p) = src[i·ld + p]: a transpose, done 8 × 8 floats at a time.
template <int64_t kWidth>
void pack_transposed(const float* src, int64_t ld, int64_t live, int64_t depth, float* dst) {
  const Tag8 d;
  for (int64_t i0 = 0; i0 < kWidth; i0 += 8) {
    const int64_t loaded = std::clamp<int64_t>(live - i0, 0, 8);
    const int64_t stored = std::min<int64_t>(8, kWidth - i0);
    const auto store_mask = hn::FirstN(d, static_cast<size_t>(stored));
    int64_t p = 0;
    for (; p + 8 <= depth; p += 8) {
      Vec8 rows[8];
      for (int64_t q = 0; q < 8; ++q) {
        rows[q] = q < loaded ? hn::LoadU(d, src + (i0 + q) * ld + p) : hn::Zero(d);
      }
      transpose_8x8(rows);
      for (int64_t t = 0; t < 8; ++t) {
        float* to = dst + (p + t) * kWidth + i0;
        if (stored == 8) {
          hn::StoreU(rows[t], d, to);
        } else {
          hn::BlendedStore(rows[t], store_mask, d, to);
        }
      }
    }
    for (; p < depth; ++p) {
      for (int64_t q = 0; q < stored; ++q) {
        dst[p * kWidth + i0 + q] = q < loaded ? src[(i0 + q) * ld + p] : 0.0f;
      }
    }
  }
}
#else
template <int64_t kWidth>
void pack_transposed(const float* src, int64_t ld, int64_t live, int64_t depth, float* dst) {
  for (int64_t p = 0; p < depth; ++p) {
    for (int64_t i = 0; i < kWidth; ++i) dst[p * kWidth + i] = i < live ? src[i * ld + p] : 0.0f;
  }
}
#endif

// rows × depth of op(A), starting at a (its element (0, 0)), as kTileRows-row micro-panels of
// kTileRows · depth floats each.
void pack_a_block(bool transposed, const float* a, int64_t lda, int64_t rows, int64_t depth,
                  float* dst) {
  if (transposed) {
    pack_contiguous<kTileRows>(a, lda, rows, depth, dst);
    return;
  }
  for (int64_t r = 0; r < rows; r += kTileRows) {
    pack_transposed<kTileRows>(a + r * lda, lda, std::min<int64_t>(kTileRows, rows - r), depth,
                               dst + r * depth);
  }
}

// depth × cols of op(B), starting at b, as micro-panels of kTileCols · depth floats each.
void pack_b_panels(bool transposed, const float* b, int64_t ldb, int64_t cols, int64_t depth,
                   float* dst) {
  if (!transposed) {
    pack_contiguous<kTileCols>(b, ldb, cols, depth, dst);
    return;
  }
  for (int64_t j = 0; j < cols; j += kTileCols) {
    pack_transposed<kTileCols>(b + j * ldb, ldb, std::min(kTileCols, cols - j), depth,
                               dst + j * depth);
  }
}

// ---------------------------------------------------------------- micro-kernel

// One rounding sequence for every tile, whole or edge: beta == 0 gives alpha · acc, otherwise
// fma(acc, alpha, beta · c).
HWY_INLINE FloatVec update(FloatVec acc, FloatVec v_alpha, FloatVec v_beta, bool read_c,
                           FloatVec c) {
  return read_c ? hn::MulAdd(acc, v_alpha, hn::Mul(c, v_beta)) : hn::Mul(acc, v_alpha);
}

// C tile (rows × cols live, at most kTileRows × kTileCols) = update(A panel · B panel).
void micro_tile(int64_t depth, const float* HWY_RESTRICT a_panel, const float* HWY_RESTRICT b_panel,
                float alpha, float beta, float* c, int64_t ldc, int64_t rows, int64_t cols) {
  const FloatTag d;
  FloatVec acc[kTileRows][kTileVectors];
  // C comes from L3 or memory once per K block; fetching it while the K loop runs, rather than
  // stalling on it at the store, was worth 10-15% at 1024³.
#pragma GCC unroll 16
  for (int i = 0; i < kTileRows; ++i) {
    hwy::Prefetch(c + i * ldc);
    hwy::Prefetch(c + i * ldc + kTileCols - 1);
  }
#pragma GCC unroll 16
  for (int i = 0; i < kTileRows; ++i) {
#pragma GCC unroll 2
    for (int j = 0; j < kTileVectors; ++j) acc[i][j] = hn::Zero(d);
  }
  for (int64_t p = 0; p < depth; ++p) {
    const float* b_row = b_panel + p * kTileCols;
    const float* a_col = a_panel + p * kTileRows;
    FloatVec b_vec[kTileVectors];
#pragma GCC unroll 2
    for (int j = 0; j < kTileVectors; ++j) b_vec[j] = hn::Load(d, b_row + j * kLanes);
#pragma GCC unroll 16
    for (int i = 0; i < kTileRows; ++i) {
      const FloatVec a_val = hn::Set(d, a_col[i]);
#pragma GCC unroll 2
      for (int j = 0; j < kTileVectors; ++j) acc[i][j] = hn::MulAdd(a_val, b_vec[j], acc[i][j]);
    }
  }
  const FloatVec v_alpha = hn::Set(d, alpha);
  const FloatVec v_beta = hn::Set(d, beta);
  const bool read_c = beta != 0.0f;
  if (rows == kTileRows && cols == kTileCols) {
#pragma GCC unroll 16
    for (int i = 0; i < kTileRows; ++i) {
#pragma GCC unroll 2
      for (int j = 0; j < kTileVectors; ++j) {
        float* to = c + i * ldc + j * kLanes;
        const FloatVec old = read_c ? hn::LoadU(d, to) : hn::Zero(d);
        hn::StoreU(update(acc[i][j], v_alpha, v_beta, read_c, old), d, to);
      }
    }
    return;
  }
  // An edge tile: park the accumulators (constant indices keep them in registers above), then
  // store the live part under masks.
  HWY_ALIGN float tile[kTileRows * kTileCols];
#pragma GCC unroll 16
  for (int i = 0; i < kTileRows; ++i) {
#pragma GCC unroll 2
    for (int j = 0; j < kTileVectors; ++j)
      hn::Store(acc[i][j], d, tile + i * kTileCols + j * kLanes);
  }
  for (int64_t i = 0; i < rows; ++i) {
    for (int64_t j0 = 0; j0 < cols; j0 += kLanes) {
      const auto mask = hn::FirstN(d, static_cast<size_t>(std::min(kLanes, cols - j0)));
      float* to = c + i * ldc + j0;
      const FloatVec old = read_c ? hn::MaskedLoad(mask, d, to) : hn::Zero(d);
      const FloatVec value = hn::Load(d, tile + i * kTileCols + j0);
      hn::BlendedStore(update(value, v_alpha, v_beta, read_c, old), mask, d, to);
    }
  }
}

// C block (rows × cols at c) = update(packed A block · packed B micro-panels), B micro-panel
// outermost so that it stays in L1 while the A micro-panels stream past.
void multiply_block(const float* a_block, int64_t rows, const float* b_panels, int64_t cols,
                    int64_t depth, float alpha, float beta, float* c, int64_t ldc) {
  for (int64_t j = 0; j < cols; j += kTileCols) {
    const float* b_panel = b_panels + (j / kTileCols) * kTileCols * depth;
    const int64_t tile_cols = std::min(kTileCols, cols - j);
    for (int64_t i = 0; i < rows; i += kTileRows) {
      micro_tile(depth, a_block + i * depth, b_panel, alpha, beta, c + i * ldc + j, ldc,
                 std::min<int64_t>(kTileRows, rows - i), tile_cols);
    }
  }
}

int64_t target_id() { return HWY_TARGET; }

}  // namespace
}  // namespace HWY_NAMESPACE
}  // namespace maxctx::kernels::cpu
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace maxctx::kernels::cpu {

HWY_EXPORT(blocking);
HWY_EXPORT(pack_a_block);
HWY_EXPORT(pack_b_panels);
HWY_EXPORT(multiply_block);
HWY_EXPORT(target_id);

namespace {

// Below this many multiply-adds a product runs on the calling thread: forking a team costs a
// few microseconds, the time of about 2^20 FMAs on one core.
constexpr double kMinFmasPerThread = 1 << 20;

int64_t round_up(int64_t x, int64_t to) { return (x + to - 1) / to * to; }
int64_t ceil_div(int64_t x, int64_t y) { return (x + y - 1) / y; }

// Packing buffers of the calling thread, grown to the largest product seen; a team's threads
// write into the caller's buffers, so concurrent callers never share one.
struct Workspace {
  hwy::AlignedFreeUniquePtr<float[]> b_panel;
  int64_t b_capacity = 0;
  hwy::AlignedFreeUniquePtr<float[]> a_blocks;
  int64_t a_capacity = 0;
};

float* reserve(hwy::AlignedFreeUniquePtr<float[]>& buffer, int64_t& capacity, int64_t floats) {
  if (floats > capacity) {
    buffer = hwy::AllocateAligned<float>(static_cast<size_t>(floats));
    capacity = floats;
  }
  return buffer.get();
}

// C = beta · C: the whole product when alpha or K is zero.
void scale_c(int64_t m, int64_t n, float beta, float* c, int64_t ldc) {
  for (int64_t i = 0; i < m; ++i) {
    float* row = c + i * ldc;
    if (beta == 0.0f) {
      std::fill(row, row + n, 0.0f);
    } else {
      for (int64_t j = 0; j < n; ++j) row[j] *= beta;
    }
  }
}

}  // namespace

void sgemm(Transpose trans_a, Transpose trans_b, int64_t m, int64_t n, int64_t k, float alpha,
           const float* a, int64_t lda, const float* b, int64_t ldb, float beta, float* c,
           int64_t ldc) {
  const bool a_t = trans_a == Transpose::kYes;
  const bool b_t = trans_b == Transpose::kYes;
  MAXCTX_CHECK(m >= 0 && n >= 0 && k >= 0, "sgemm sizes m = {}, n = {}, k = {}: must be >= 0", m, n,
               k);
  MAXCTX_CHECK(lda >= std::max<int64_t>(1, a_t ? m : k), "sgemm lda = {}: must be >= max(1, {})",
               lda, a_t ? m : k);
  MAXCTX_CHECK(ldb >= std::max<int64_t>(1, b_t ? k : n), "sgemm ldb = {}: must be >= max(1, {})",
               ldb, b_t ? k : n);
  MAXCTX_CHECK(ldc >= std::max<int64_t>(1, n), "sgemm ldc = {}: must be >= max(1, n = {})", ldc, n);
  if (m == 0 || n == 0) return;
  if (k == 0 || alpha == 0.0f) {
    scale_c(m, n, beta, c, ldc);
    return;
  }

  const Blocking bl = HWY_DYNAMIC_DISPATCH(blocking)();
  const double fmas = static_cast<double>(m) * static_cast<double>(n) * static_cast<double>(k);
  const int threads = omp_in_parallel() ? 1
                                        : static_cast<int>(std::clamp<double>(
                                              fmas / kMinFmasPerThread, 1, omp_get_max_threads()));

  // M blocks: at most block_m rows, as many as makes the count a multiple of the threads (equal
  // shares), rounded to whole tiles so that the tile grid never depends on the thread count.
  int64_t m_blocks = round_up(ceil_div(m, bl.block_m), threads);
  const int64_t block_m = round_up(ceil_div(m, m_blocks), bl.tile_rows);
  m_blocks = ceil_div(m, block_m);
  const int64_t panel_cols = std::min(n, bl.block_n);
  const int64_t panels_max = ceil_div(panel_cols, bl.tile_cols);
  // With fewer M blocks than threads, each block's micro-panels are split between threads too.
  const int64_t n_splits =
      m_blocks >= threads ? 1 : std::min(panels_max, ceil_div(threads, m_blocks));

  const int64_t depth_max = std::min(k, bl.block_k);
  const int64_t a_floats = block_m * depth_max;
  static thread_local Workspace ws;
  float* b_panel = reserve(ws.b_panel, ws.b_capacity, panels_max * bl.tile_cols * depth_max);
  float* a_blocks = reserve(ws.a_blocks, ws.a_capacity, threads * a_floats);

  const auto pack_a = HWY_DYNAMIC_DISPATCH(pack_a_block);
  const auto pack_b = HWY_DYNAMIC_DISPATCH(pack_b_panels);
  const auto multiply = HWY_DYNAMIC_DISPATCH(multiply_block);

  // Thread `index` of `count` takes a contiguous share of each loop; the barriers keep the B
  // panel from being used before it is packed, or repacked while in use.
  const auto work = [&](int64_t index, int64_t count) {
    float* a_block = a_blocks + index * a_floats;
    for (int64_t j0 = 0; j0 < n; j0 += bl.block_n) {
      const int64_t cols = std::min(bl.block_n, n - j0);
      const int64_t panels = ceil_div(cols, bl.tile_cols);
      for (int64_t p0 = 0; p0 < k; p0 += bl.block_k) {
        const int64_t depth = std::min(bl.block_k, k - p0);
        // K blocks after the first add to what the first one stored.
        const float beta_block = p0 == 0 ? beta : 1.0f;
        const int64_t q_first = gemm_share(panels, index, count);
        const int64_t q_last = gemm_share(panels, index + 1, count);
        if (q_first < q_last) {
          const int64_t j = j0 + q_first * bl.tile_cols;
          const float* from = b_t ? b + j * ldb + p0 : b + p0 * ldb + j;
          pack_b(b_t, from, ldb, std::min(n - j, (q_last - q_first) * bl.tile_cols), depth,
                 b_panel + q_first * bl.tile_cols * depth);
        }
        if (count > 1) {
#pragma omp barrier
        }
        int64_t packed_block = -1;  // the M block now in a_block
        for_each_gemm_task(m_blocks, n_splits, panels, index, count,
                           [&](int64_t block, int64_t q_begin, int64_t q_end) {
                             const int64_t i0 = block * block_m;
                             const int64_t rows = std::min(block_m, m - i0);
                             if (block != packed_block) {
                               pack_a(a_t, a_t ? a + p0 * lda + i0 : a + i0 * lda + p0, lda, rows,
                                      depth, a_block);
                               packed_block = block;
                             }
                             const int64_t j = j0 + q_begin * bl.tile_cols;
                             multiply(a_block, rows, b_panel + q_begin * bl.tile_cols * depth,
                                      std::min(n - j, (q_end - q_begin) * bl.tile_cols), depth,
                                      alpha, beta_block, c + i0 * ldc + j, ldc);
                           });
        if (count > 1) {
#pragma omp barrier
        }
      }
    }
  };
  if (threads == 1) {
    work(0, 1);  // no team at all: forking even a team of one costs as much as a 32³ product
    return;
  }
#pragma omp parallel num_threads(threads)
  work(omp_get_thread_num(), omp_get_num_threads());
}

const char* sgemm_simd_target() { return hwy::TargetName(HWY_DYNAMIC_DISPATCH(target_id)()); }

}  // namespace maxctx::kernels::cpu
#endif  // HWY_ONCE

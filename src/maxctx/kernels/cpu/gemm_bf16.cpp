// The bf16 GEMM (see gemm_bf16.h): sgemm's loops (jc over N, pc over K, ic over M blocks, jr/ir
// over micro-panels; sgemm.cpp explains them) over panels of bf16 pairs, with AMX micro-tiles.
//
// Packed layout (words of two bf16: element 2q in the low half, 2q + 1 in the high half, zero past
// the live rows or columns and past K; each K block's pairs padded with zero words to a multiple
// of kChunkPairs, one TDPBF16PS's depth):
//  - A micro-panel, kTileRows rows: word (r, q) at r · pairs + q, so 16 rows × 16 words at stride
//    4 · pairs bytes are one AMX A tile;
//  - B micro-panel, kTileCols columns: word (q, j) at q · kTileCols + j, so 16 pair rows × 16
//    columns at stride 4 · kTileCols bytes are one AMX B tile (the VNNI layout).
// The AMX tile is compiled with a function attribute (the baseline is AVX2) and chosen at run time
// when the CPU has AMX-BF16 and Linux grants the tile state; the portable tile replays its exact
// sequence (gemm_bf16.h) on any CPU. Without AMX, the vector tile (gemm_bf16_tile.h: the same
// sequence in vector FMAs, without the flushes) runs wherever the operands' exponents show that no
// intermediate can be subnormal, which is checked per A block and B micro-panel, and the portable
// tile elsewhere; both give the same bits. The earlier vdpbf16ps tile is gone: it adds the two
// products of a pair one after the other, which AMX does not, and it ran at 1/6 of AMX's speed.
#include "maxctx/kernels/cpu/gemm_bf16.h"

#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <atomic>
#include <cfloat>
#include <cmath>
#include <cstring>
#include <string>

#include "hwy/aligned_allocator.h"
#include "maxctx/core/check.h"
#include "maxctx/kernels/cpu/amx.h"
#include "maxctx/kernels/cpu/gemm_bf16_tile.h"
#include "maxctx/kernels/cpu/gemm_tasks.h"

namespace maxctx::kernels::cpu {
namespace {

// The micro-tile (gemm_bf16_tile.h): 32 rows and 32 columns of C, two AMX tiles of 16 each way,
// and 16 pairs of K per TDPBF16PS (a 64-byte tile row).
constexpr int64_t kTileRows = kBf16TileRows;
constexpr int64_t kTileCols = kBf16TileCols;
constexpr int64_t kChunkPairs = kBf16ChunkPairs;
static_assert(kTileRows == 32 && kTileCols == 32 && kChunkPairs == 16, "the AMX tile's shape");
// Cache blocks for a Sapphire Rapids core (48 KiB L1d, 2 MiB L2), in elements of K:
//  - the B micro-panel, 512 × 32 × 2 B = 32 KiB, and the A micro-panel (32 KiB) stay in L1/L2;
//  - the A block, 192 × 512 × 2 B = 192 KiB, in L2;
//  - the B panel, 512 × 4096 × 2 B = 4 MiB, in L3.
constexpr int64_t kBlockK = kGemmBf16BlockK;
constexpr int64_t kBlockM = 6 * kTileRows;
constexpr int64_t kBlockN = 4096;
static_assert(kBlockK % (2 * kChunkPairs) == 0 && kBlockN % kTileCols == 0);

// Below this many multiply-adds a product runs on the calling thread (sgemm's rule).
constexpr double kMinFmasPerThread = 1 << 20;
// A bf16 C is computed in fp32 chunks of about this many floats, then rounded.
constexpr int64_t kBf16OutChunk = int64_t{1} << 22;

Bf16Path g_path = Bf16Path::kBest;
// A blocks × B micro-panels the vector path left to the portable tile (gemm_bf16_tile.h).
std::atomic<int64_t> g_portable_fallbacks{0};

int64_t round_up(int64_t x, int64_t to) { return (x + to - 1) / to * to; }
int64_t ceil_div(int64_t x, int64_t y) { return (x + y - 1) / y; }
// Packed pairs of a K block of `depth` elements: whole TDPBF16PS chunks.
int64_t padded_pairs(int64_t depth) { return round_up(ceil_div(depth, 2), kChunkPairs); }

// ---------------------------------------------------------------- packing

// The bf16 bits AMX multiplies: round to nearest even, subnormals read as signed zeros.
inline uint32_t bf16_bits(uint16_t bits) { return (bits & 0x7f80u) == 0 ? (bits & 0x8000u) : bits; }
inline uint32_t bf16_bits(float x) { return bf16_bits(float_to_bf16(x).bits); }
inline uint32_t bf16_bits(bf16 x) { return bf16_bits(x.bits); }

// Word (r, q) of a micro-panel of op(X), op(X)(r, p) = x[r·ld + p] when along_k, else x[p·ld + r];
// r < live, 2q < depth.
template <typename S>
inline uint32_t pair_word(const S* x, int64_t ld, bool along_k, int64_t r, int64_t q,
                          int64_t depth) {
  const int64_t p = 2 * q;
  const auto at = [&](int64_t k) { return along_k ? x[r * ld + k] : x[k * ld + r]; };
  return bf16_bits(at(p)) | (p + 1 < depth ? bf16_bits(at(p + 1)) << 16 : 0u);
}

// `rows` rows × `depth` of op(X) into micro-panels of W rows, in the A layout (row_major: word
// (r, q) at r · pairs + q) or the B layout (word (q, r) at q · W + r), `pairs` words per row.
template <int64_t W, typename S>
void pack_panels(const S* x, int64_t ld, bool along_k, int64_t rows, int64_t depth, bool row_major,
                 uint32_t* dst) {
  const int64_t pairs = padded_pairs(depth);
  const int64_t live_pairs = ceil_div(depth, 2);
  for (int64_t r0 = 0; r0 < rows; r0 += W) {
    const int64_t live = std::min(W, rows - r0);
    const S* panel = along_k ? x + r0 * ld : x + r0;
    uint32_t* to = dst + r0 / W * W * pairs;
    const auto word = [&](int64_t r, int64_t q) -> uint32_t& {
      return row_major ? to[r * pairs + q] : to[q * W + r];
    };
    if (along_k == row_major) {  // read and write along the pairs
      for (int64_t r = 0; r < W; ++r) {
        for (int64_t q = 0; q < pairs; ++q) {
          word(r, q) = r < live && q < live_pairs ? pair_word(panel, ld, along_k, r, q, depth) : 0;
        }
      }
    } else {
      for (int64_t q = 0; q < pairs; ++q) {
        for (int64_t r = 0; r < W; ++r) {
          word(r, q) = r < live && q < live_pairs ? pair_word(panel, ld, along_k, r, q, depth) : 0;
        }
      }
    }
  }
}

// Rows [row, row + rows) × depth [col, col + depth) of op(X) (op(X)(r, p) = X[r·ld + p] when
// along_k), packed into micro-panels of width W.
template <int64_t W>
void pack(ConstFloats x, int64_t ld, bool along_k, int64_t row, int64_t col, int64_t rows,
          int64_t depth, bool row_major, uint32_t* dst) {
  const int64_t offset = along_k ? row * ld + col : col * ld + row;
  if (x.dtype == DType::kF32) {
    pack_panels<W>(static_cast<const float*>(x.data) + offset, ld, along_k, rows, depth, row_major,
                   dst);
  } else {
    pack_panels<W>(static_cast<const bf16*>(x.data) + offset, ld, along_k, rows, depth, row_major,
                   dst);
  }
}

// ---------------------------------------------------------------- micro-tiles
// C tile (rows × cols live) = alpha · acc, or fma(acc, alpha, beta · c) when beta != 0 (sgemm's
// update), acc the K block's sum over `pairs` words of the A and B micro-panels.
using TileFn = void (*)(int64_t pairs, const uint32_t* a, const uint32_t* b, float alpha,
                        float beta, float* c, int64_t ldc, int64_t rows, int64_t cols);

void store_tile(const float (&acc)[kTileRows][kTileCols], float alpha, float beta, float* c,
                int64_t ldc, int64_t rows, int64_t cols) {
  const bool read_c = beta != 0.0f;
  for (int64_t i = 0; i < rows; ++i) {
    for (int64_t j = 0; j < cols; ++j) {
      float& to = c[i * ldc + j];
      to = read_c ? std::fma(acc[i][j], alpha, to * beta) : acc[i][j] * alpha;
    }
  }
}

__attribute__((target("amx-tile,amx-bf16"))) void tile_amx(int64_t pairs, const uint32_t* a,
                                                           const uint32_t* b, float alpha,
                                                           float beta, float* c, int64_t ldc,
                                                           int64_t rows, int64_t cols) {
  const int64_t a_stride = pairs * 4;
  constexpr int64_t b_stride = kTileCols * 4;
  const uint32_t* a_low = a + 16 * pairs;  // rows 16-31
  _tile_zero(0);
  _tile_zero(1);
  _tile_zero(2);
  _tile_zero(3);
  for (int64_t q = 0; q < pairs; q += kChunkPairs) {
    _tile_loadd(4, a + q, a_stride);
    _tile_loadd(5, a_low + q, a_stride);
    _tile_loadd(6, b + q * kTileCols, b_stride);
    _tile_loadd(7, b + q * kTileCols + 16, b_stride);
    _tile_dpbf16ps(0, 4, 6);
    _tile_dpbf16ps(1, 4, 7);
    _tile_dpbf16ps(2, 5, 6);
    _tile_dpbf16ps(3, 5, 7);
  }
  alignas(64) float acc[kTileRows][kTileCols];
  _tile_stored(0, &acc[0][0], kTileCols * 4);
  _tile_stored(1, &acc[0][16], kTileCols * 4);
  _tile_stored(2, &acc[16][0], kTileCols * 4);
  _tile_stored(3, &acc[16][16], kTileCols * 4);
  store_tile(acc, alpha, beta, c, ldc, rows, cols);
}

// AMX's flush of a subnormal input or result to zero (sign kept).
inline float flush_subnormal(float x) {
  return std::fabs(x) < FLT_MIN ? std::copysign(0.0f, x) : x;
}
inline float bf16_word_to_float(uint32_t bits) {
  float out;
  std::memcpy(&out, &bits, sizeof(out));
  return out;
}

// TDPBF16PS's sequence (gemm_bf16.h), one chunk of kChunkPairs pairs at a time.
void tile_portable(int64_t pairs, const uint32_t* a, const uint32_t* b, float alpha, float beta,
                   float* c, int64_t ldc, int64_t rows, int64_t cols) {
  float acc[kTileRows][kTileCols] = {};
  for (int64_t q0 = 0; q0 < pairs; q0 += kChunkPairs) {
    float b_even[kChunkPairs][kTileCols], b_odd[kChunkPairs][kTileCols];
    for (int64_t q = 0; q < kChunkPairs; ++q) {
      for (int64_t j = 0; j < kTileCols; ++j) {
        const uint32_t word = b[(q0 + q) * kTileCols + j];
        b_even[q][j] = bf16_word_to_float(word << 16);
        b_odd[q][j] = bf16_word_to_float(word & 0xffff0000u);
      }
    }
    for (int64_t i = 0; i < kTileRows; ++i) {
      float even[kTileCols] = {}, odd[kTileCols] = {};
      for (int64_t q = 0; q < kChunkPairs; ++q) {
        const uint32_t word = a[i * pairs + q0 + q];
        const float a_even = bf16_word_to_float(word << 16);
        const float a_odd = bf16_word_to_float(word & 0xffff0000u);
        for (int64_t j = 0; j < kTileCols; ++j) {
          even[j] = flush_subnormal(std::fma(a_even, b_even[q][j], even[j]));
          odd[j] = flush_subnormal(std::fma(a_odd, b_odd[q][j], odd[j]));
        }
      }
      for (int64_t j = 0; j < kTileCols; ++j) {
        acc[i][j] = flush_subnormal(flush_subnormal(acc[i][j]) + flush_subnormal(even[j] + odd[j]));
      }
    }
  }
  store_tile(acc, alpha, beta, c, ldc, rows, cols);
}

// C block (rows × cols at c) from a packed A block and B micro-panels, B micro-panel outermost.
// AMX tiles: this thread loads its tile configuration here and releases it after.
void multiply_block(TileFn tile, const uint32_t* a_block, int64_t rows, const uint32_t* b_panels,
                    int64_t cols, int64_t pairs, float alpha, float beta, float* c, int64_t ldc) {
  const bool amx = tile == &tile_amx;
  if (amx) amx_load_tile_config();
  for (int64_t j = 0; j < cols; j += kTileCols) {
    const uint32_t* b_panel = b_panels + j / kTileCols * kTileCols * pairs;
    for (int64_t i = 0; i < rows; i += kTileRows) {
      tile(pairs, a_block + i * pairs, b_panel, alpha, beta, c + i * ldc + j, ldc,
           std::min(kTileRows, rows - i), std::min(kTileCols, cols - j));
    }
  }
  if (amx) amx_release_tiles();
}

// ---------------------------------------------------------------- driver

struct Workspace {
  hwy::AlignedFreeUniquePtr<uint32_t[]> b_panel;
  int64_t b_capacity = 0;
  hwy::AlignedFreeUniquePtr<uint32_t[]> a_blocks;
  int64_t a_capacity = 0;
  hwy::AlignedFreeUniquePtr<float[]> c_chunk;  // fp32 rows of a bf16 C
  int64_t c_capacity = 0;
};

template <typename T>
T* reserve(hwy::AlignedFreeUniquePtr<T[]>& buffer, int64_t& capacity, int64_t count) {
  if (count > capacity) {
    buffer = hwy::AllocateAligned<T>(static_cast<size_t>(count));
    capacity = count;
  }
  return buffer.get();
}

// This thread's operands of the vector tile widened to fp32 (gemm_bf16_tile.h): the A block's
// micro-panels and one B micro-panel, 448 KiB at most.
struct WidePanels {
  hwy::AlignedFreeUniquePtr<float[]> a, b;
  int64_t a_capacity = 0, b_capacity = 0;
};

// multiply_block on the vector tile where the operands allow it (the exponents of the A block,
// zero-padded to whole micro-panels, and of each B micro-panel pass bf16_sums_stay_normal), else
// on tile_portable: the same bits either way. Each operand is scanned and widened once per block
// (A on the first B micro-panel that runs vector tiles), against 2 · rows (B) or 2 · cols (A)
// multiply-adds per word.
void multiply_block_vector(const uint32_t* a_block, int64_t rows, const uint32_t* b_panels,
                           int64_t cols, int64_t pairs, float alpha, float beta, float* c,
                           int64_t ldc) {
  static thread_local WidePanels wide;
  const int64_t panel_floats = pairs / kChunkPairs * kBf16WideChunkFloats;
  const int64_t a_panels = ceil_div(rows, kTileRows);
  float* wide_a = reserve(wide.a, wide.a_capacity, a_panels * panel_floats);
  float* wide_b = reserve(wide.b, wide.b_capacity, panel_floats);
  const Bf16Exponents a_exponents = bf16_exponents(a_block, a_panels * kTileRows * pairs);
  bool a_widened = false;
  for (int64_t j = 0; j < cols; j += kTileCols) {
    const uint32_t* b_panel = b_panels + j / kTileCols * kTileCols * pairs;
    const int64_t live_cols = std::min(kTileCols, cols - j);
    if (!bf16_sums_stay_normal(a_exponents, bf16_exponents(b_panel, kTileCols * pairs))) {
      g_portable_fallbacks.fetch_add(1, std::memory_order_relaxed);
      for (int64_t i = 0; i < rows; i += kTileRows) {
        tile_portable(pairs, a_block + i * pairs, b_panel, alpha, beta, c + i * ldc + j, ldc,
                      std::min(kTileRows, rows - i), live_cols);
      }
      continue;
    }
    if (!a_widened) {
      for (int64_t p = 0; p < a_panels; ++p) {
        bf16_widen_a_panel(pairs, a_block + p * kTileRows * pairs, wide_a + p * panel_floats);
      }
      a_widened = true;
    }
    bf16_widen_b_panel(pairs, b_panel, wide_b);
    for (int64_t i = 0; i < rows; i += kTileRows) {
      alignas(64) float acc[kTileRows][kTileCols];
      bf16_vector_tile_sums(pairs, wide_a + i / kTileRows * panel_floats, wide_b, &acc[0][0]);
      store_tile(acc, alpha, beta, c + i * ldc + j, ldc, std::min(kTileRows, rows - i), live_cols);
    }
  }
}

// The micro-tiles a product runs on.
enum class Tiles {
  kAmx,
  kVector,  // multiply_block_vector: the vector tile where the operands allow it, else portable
  kPortable,
};

Tiles tiles_to_run() {
  if (g_path == Bf16Path::kPortable) return Tiles::kPortable;
  if (g_path == Bf16Path::kBest && gemm_bf16_amx_available()) return Tiles::kAmx;
  return bf16_vector_tile_available() ? Tiles::kVector : Tiles::kPortable;
}

// The product into an fp32 C (k > 0, alpha != 0).
void gemm_f32_c(bool a_t, bool b_t, int64_t m, int64_t n, int64_t k, float alpha, ConstFloats a,
                int64_t lda, ConstFloats b, int64_t ldb, float beta, float* c, int64_t ldc,
                Workspace& ws) {
  const Tiles tiles = tiles_to_run();
  const double fmas = static_cast<double>(m) * static_cast<double>(n) * static_cast<double>(k);
  const int threads = omp_in_parallel() ? 1
                                        : static_cast<int>(std::clamp<double>(
                                              fmas / kMinFmasPerThread, 1, omp_get_max_threads()));
  // M blocks: equal shares per thread, whole tiles (the tile grid never changes a value anyway:
  // only the K blocks are part of the rounding sequence).
  int64_t m_blocks = round_up(ceil_div(m, kBlockM), threads);
  const int64_t block_m = round_up(ceil_div(m, m_blocks), kTileRows);
  m_blocks = ceil_div(m, block_m);
  const int64_t panels_max = ceil_div(std::min(n, kBlockN), kTileCols);
  const int64_t n_splits =
      m_blocks >= threads ? 1 : std::min(panels_max, ceil_div(threads, m_blocks));
  const int64_t pairs_max = padded_pairs(std::min(k, kBlockK));
  const int64_t a_words = block_m * pairs_max;
  uint32_t* b_panel = reserve(ws.b_panel, ws.b_capacity, panels_max * kTileCols * pairs_max);
  uint32_t* a_blocks = reserve(ws.a_blocks, ws.a_capacity, threads * a_words);

  const auto work = [&](int64_t index, int64_t count) {
    uint32_t* a_block = a_blocks + index * a_words;
    for (int64_t j0 = 0; j0 < n; j0 += kBlockN) {
      const int64_t panels = ceil_div(std::min(kBlockN, n - j0), kTileCols);
      for (int64_t p0 = 0; p0 < k; p0 += kBlockK) {
        const int64_t depth = std::min(kBlockK, k - p0);
        const int64_t pairs = padded_pairs(depth);
        const float beta_block = p0 == 0 ? beta : 1.0f;
        const int64_t q_first = gemm_share(panels, index, count);
        const int64_t q_last = gemm_share(panels, index + 1, count);
        if (q_first < q_last) {
          const int64_t j = j0 + q_first * kTileCols;
          pack<kTileCols>(b, ldb, b_t, j, p0, std::min(n - j, (q_last - q_first) * kTileCols),
                          depth, false, b_panel + q_first * kTileCols * pairs);
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
                               pack<kTileRows>(a, lda, !a_t, i0, p0, rows, depth, true, a_block);
                               packed_block = block;
                             }
                             const int64_t j = j0 + q_begin * kTileCols;
                             const uint32_t* b_panels = b_panel + q_begin * kTileCols * pairs;
                             const int64_t cols = std::min(n - j, (q_end - q_begin) * kTileCols);
                             if (tiles == Tiles::kVector) {
                               multiply_block_vector(a_block, rows, b_panels, cols, pairs, alpha,
                                                     beta_block, c + i0 * ldc + j, ldc);
                             } else {
                               multiply_block(tiles == Tiles::kAmx ? &tile_amx : &tile_portable,
                                              a_block, rows, b_panels, cols, pairs, alpha,
                                              beta_block, c + i0 * ldc + j, ldc);
                             }
                           });
        if (count > 1) {
#pragma omp barrier
        }
      }
    }
  };
  if (threads == 1) {
    work(0, 1);
    return;
  }
#pragma omp parallel num_threads(threads)
  work(omp_get_thread_num(), omp_get_num_threads());
}

}  // namespace

void gemm_bf16(Transpose trans_a, Transpose trans_b, int64_t m, int64_t n, int64_t k, float alpha,
               ConstFloats a, int64_t lda, ConstFloats b, int64_t ldb, float beta, Floats c,
               int64_t ldc) {
  const bool a_t = trans_a == Transpose::kYes;
  const bool b_t = trans_b == Transpose::kYes;
  MAXCTX_CHECK(m >= 0 && n >= 0 && k >= 0, "gemm_bf16 sizes m = {}, n = {}, k = {}: must be >= 0",
               m, n, k);
  MAXCTX_CHECK(lda >= std::max<int64_t>(1, a_t ? m : k),
               "gemm_bf16 lda = {}: must be >= max(1, {})", lda, a_t ? m : k);
  MAXCTX_CHECK(ldb >= std::max<int64_t>(1, b_t ? k : n),
               "gemm_bf16 ldb = {}: must be >= max(1, {})", ldb, b_t ? k : n);
  MAXCTX_CHECK(ldc >= std::max<int64_t>(1, n), "gemm_bf16 ldc = {}: must be >= max(1, n = {})", ldc,
               n);
  for (const DType t : {a.dtype, b.dtype, c.dtype}) {
    MAXCTX_CHECK(t == DType::kF32 || t == DType::kBF16,
                 "gemm_bf16 takes f32 or bf16 matrices, got {}", dtype_name(t));
  }
  if (m == 0 || n == 0) return;
  static thread_local Workspace ws;
  const bool product = k > 0 && alpha != 0.0f;
  if (c.dtype == DType::kF32) {
    float* c_f32 = static_cast<float*>(c.data);
    if (product) return gemm_f32_c(a_t, b_t, m, n, k, alpha, a, lda, b, ldb, beta, c_f32, ldc, ws);
    for (int64_t i = 0; i < m; ++i) {  // C = beta · C (sgemm's rule: beta 0 does not read C)
      float* row = c_f32 + i * ldc;
      for (int64_t j = 0; j < n; ++j) row[j] = beta == 0.0f ? 0.0f : row[j] * beta;
    }
    return;
  }
  // A bf16 C: chunks of rows in fp32 (only K blocks shape the rounding sequence, so chunking
  // rows changes no bit), each rounded once.
  bf16* c_bf16 = static_cast<bf16*>(c.data);
  const int64_t chunk_rows =
      std::min(m, round_up(std::max<int64_t>(1, kBf16OutChunk / n), kBlockM));
  float* chunk = reserve(ws.c_chunk, ws.c_capacity, chunk_rows * n);
  for (int64_t i0 = 0; i0 < m; i0 += chunk_rows) {
    const int64_t rows = std::min(chunk_rows, m - i0);
    for (int64_t i = 0; i < rows; ++i) {
      for (int64_t j = 0; j < n; ++j) {
        chunk[i * n + j] = beta == 0.0f ? 0.0f : bf16_to_float(c_bf16[(i0 + i) * ldc + j]);
      }
    }
    if (product) {
      const int64_t a_offset = a_t ? i0 : i0 * lda;
      const size_t a_bytes = dtype_size(a.dtype);
      const ConstFloats a_rows{static_cast<const char*>(a.data) + a_offset * a_bytes, a.dtype};
      gemm_f32_c(a_t, b_t, rows, n, k, alpha, a_rows, lda, b, ldb, beta, chunk, n, ws);
    } else if (beta != 0.0f) {
      for (int64_t e = 0; e < rows * n; ++e) chunk[e] *= beta;
    }
    for (int64_t i = 0; i < rows; ++i) {
      for (int64_t j = 0; j < n; ++j) c_bf16[(i0 + i) * ldc + j] = float_to_bf16(chunk[i * n + j]);
    }
  }
}

void set_gemm_bf16_path(Bf16Path path) { g_path = path; }

bool gemm_bf16_amx_available() { return amx_bf16_usable(); }

const char* gemm_bf16_kernel_name() {
  static const std::string vector = std::string("vector_exact_") + bf16_vector_tile_target();
  switch (tiles_to_run()) {
    case Tiles::kAmx:
      return "amx_bf16";
    case Tiles::kVector:
      return vector.c_str();
    case Tiles::kPortable:
      break;
  }
  return "portable";
}

int64_t gemm_bf16_portable_fallbacks() {
  return g_portable_fallbacks.load(std::memory_order_relaxed);
}

}  // namespace maxctx::kernels::cpu

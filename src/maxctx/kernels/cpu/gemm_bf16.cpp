// The bf16 GEMM (see gemm_bf16.h): sgemm's loops (jc over N, pc over K, ic over M blocks, jr/ir
// over micro-panels; sgemm.cpp explains them) over panels of bf16 pairs.
//
// Packed layout: a micro-panel of width W (8 rows of A, or 32 columns of B) is `pairs` groups of
// W 32-bit words, word (q, r) = bf16 of element (r, 2q) in its low half and of (r, 2q + 1) in its
// high half, zero past the live rows or columns and past an odd K. So one broadcast word of A
// times one vector of B is a vdpbf16ps into 16 accumulators, and the portable tile reads the same
// words. The fast tile is compiled for AVX512_BF16 with a function attribute (the baseline is
// AVX2) and chosen at run time, as int8.cpp does for VNNI; no Highway here, since Highway 1.0.3
// has no target that emits vdpbf16ps.
#include "maxctx/kernels/cpu/gemm_bf16.h"

#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstring>

#include "hwy/aligned_allocator.h"
#include "maxctx/core/check.h"
#include "maxctx/kernels/cpu/gemm_tasks.h"

namespace maxctx::kernels::cpu {
namespace {

constexpr int64_t kTileRows = 8;   // rows of C per micro-tile: 8 × 2 accumulators of 16 floats
constexpr int64_t kTileCols = 32;  // columns of C per micro-tile: two vectors
// Cache blocks for a Sapphire Rapids core (48 KiB L1d, 2 MiB L2), in elements of K:
//  - the B micro-panel, 512 × 32 × 2 B = 32 KiB, stays in L1 beside the A micro-panel (8 KiB);
//  - the A block, 192 × 512 × 2 B = 192 KiB, in L2;
//  - the B panel, 512 × 4096 × 2 B = 4 MiB, in L3.
constexpr int64_t kBlockK = kGemmBf16BlockK;
constexpr int64_t kBlockM = 24 * kTileRows;
constexpr int64_t kBlockN = 4096;
static_assert(kBlockK % 2 == 0 && kBlockN % kTileCols == 0);

// Below this many multiply-adds a product runs on the calling thread (sgemm's rule).
constexpr double kMinFmasPerThread = 1 << 20;
// A bf16 C is computed in fp32 chunks of about this many floats, then rounded.
constexpr int64_t kBf16OutChunk = int64_t{1} << 22;

Bf16Path g_path = Bf16Path::kBest;

int64_t round_up(int64_t x, int64_t to) { return (x + to - 1) / to * to; }
int64_t ceil_div(int64_t x, int64_t y) { return (x + y - 1) / y; }

// ---------------------------------------------------------------- packing

// The bf16 bits vdpbf16ps multiplies: round to nearest even, subnormals read as signed zeros.
inline uint32_t bf16_bits(uint16_t bits) { return (bits & 0x7f80u) == 0 ? (bits & 0x8000u) : bits; }
inline uint32_t bf16_bits(float x) { return bf16_bits(float_to_bf16(x).bits); }
inline uint32_t bf16_bits(bf16 x) { return bf16_bits(x.bits); }
template <typename S>
inline uint32_t pair_word(S lo, S hi) {
  return bf16_bits(lo) | bf16_bits(hi) << 16;
}

// One micro-panel of width W whose rows run along K: src(r, p) = src[r·ld + p].
template <int64_t W, typename S>
void pack_along_k(const S* src, int64_t ld, int64_t live, int64_t depth, uint32_t* dst) {
  const int64_t pairs = ceil_div(depth, 2);
  const int64_t whole = depth / 2;
  for (int64_t r = 0; r < W; ++r) {
    uint32_t* to = dst + r;
    if (r >= live) {
      for (int64_t q = 0; q < pairs; ++q) to[q * W] = 0;
      continue;
    }
    const S* row = src + r * ld;
    for (int64_t q = 0; q < whole; ++q) to[q * W] = pair_word(row[2 * q], row[2 * q + 1]);
    if (whole < pairs) to[whole * W] = bf16_bits(row[depth - 1]);
  }
}

// One micro-panel of width W whose rows run across K: src(r, p) = src[p·ld + r].
template <int64_t W, typename S>
void pack_across_k(const S* src, int64_t ld, int64_t live, int64_t depth, uint32_t* dst) {
  const int64_t width = std::min(W, live);
  for (int64_t q = 0; q < ceil_div(depth, 2); ++q) {
    const S* lo = src + 2 * q * ld;
    uint32_t* to = dst + q * W;
    if (2 * q + 1 < depth) {
      const S* hi = lo + ld;
      for (int64_t r = 0; r < width; ++r) to[r] = pair_word(lo[r], hi[r]);
    } else {
      for (int64_t r = 0; r < width; ++r) to[r] = bf16_bits(lo[r]);
    }
    for (int64_t r = width; r < W; ++r) to[r] = 0;
  }
}

// `count` elements of op(X) from (row, col): panels of W rows of op(X) (rows of A, columns of B),
// op(X)(r, p) = x[r·ld + p] when along_k, else x[p·ld + r].
template <int64_t W, typename S>
void pack_panels(const S* x, int64_t ld, bool along_k, int64_t rows, int64_t depth, uint32_t* dst) {
  const int64_t words = ceil_div(depth, 2) * W;
  for (int64_t r = 0; r < rows; r += W) {
    const int64_t live = std::min(W, rows - r);
    if (along_k) {
      pack_along_k<W>(x + r * ld, ld, live, depth, dst + r / W * words);
    } else {
      pack_across_k<W>(x + r, ld, live, depth, dst + r / W * words);
    }
  }
}

// Rows [row, row + rows) × depth [col, col + depth) of op(X) (op(X)(r, p) = X[r·ld + p] when
// along_k), packed into panels of width W.
template <int64_t W>
void pack(ConstFloats x, int64_t ld, bool along_k, int64_t row, int64_t col, int64_t rows,
          int64_t depth, uint32_t* dst) {
  const int64_t offset = along_k ? row * ld + col : col * ld + row;
  if (x.dtype == DType::kF32) {
    pack_panels<W>(static_cast<const float*>(x.data) + offset, ld, along_k, rows, depth, dst);
  } else {
    pack_panels<W>(static_cast<const bf16*>(x.data) + offset, ld, along_k, rows, depth, dst);
  }
}

// ---------------------------------------------------------------- micro-tiles
// C tile (rows × cols live) = alpha · acc, or fma(acc, alpha, beta · c) when beta != 0 (sgemm's
// update), acc the sum over `pairs` words of the A and B micro-panels.
using TileFn = void (*)(int64_t pairs, const uint32_t* a, const uint32_t* b, float alpha,
                        float beta, float* c, int64_t ldc, int64_t rows, int64_t cols);

__attribute__((target("avx512f,avx512bw,avx512bf16"))) void tile_dpbf16(
    int64_t pairs, const uint32_t* a, const uint32_t* b, float alpha, float beta, float* c,
    int64_t ldc, int64_t rows, int64_t cols) {
  __m512 acc[kTileRows][2];
#pragma GCC unroll 8
  for (int i = 0; i < kTileRows; ++i) acc[i][0] = acc[i][1] = _mm512_setzero_ps();
  for (int64_t q = 0; q < pairs; ++q) {
    const __m512bh b0 = (__m512bh)_mm512_loadu_si512(b + q * kTileCols);
    const __m512bh b1 = (__m512bh)_mm512_loadu_si512(b + q * kTileCols + 16);
    const uint32_t* a_q = a + q * kTileRows;
#pragma GCC unroll 8
    for (int i = 0; i < kTileRows; ++i) {
      const __m512bh a_pair = (__m512bh)_mm512_set1_epi32(static_cast<int>(a_q[i]));
      acc[i][0] = _mm512_dpbf16_ps(acc[i][0], a_pair, b0);
      acc[i][1] = _mm512_dpbf16_ps(acc[i][1], a_pair, b1);
    }
  }
  const __m512 v_alpha = _mm512_set1_ps(alpha);
  const __m512 v_beta = _mm512_set1_ps(beta);
  const bool read_c = beta != 0.0f;
  const __mmask16 masks[2] = {static_cast<__mmask16>(cols >= 16 ? 0xffff : (1u << cols) - 1),
                              static_cast<__mmask16>(cols >= 32   ? 0xffff
                                                     : cols <= 16 ? 0
                                                                  : (1u << (cols - 16)) - 1)};
#pragma GCC unroll 8
  for (int i = 0; i < kTileRows; ++i) {
    if (i >= rows) break;
#pragma GCC unroll 2
    for (int j = 0; j < 2; ++j) {
      float* to = c + i * ldc + j * 16;
      const __m512 value =
          read_c ? _mm512_fmadd_ps(acc[i][j], v_alpha,
                                   _mm512_mul_ps(_mm512_maskz_loadu_ps(masks[j], to), v_beta))
                 : _mm512_mul_ps(acc[i][j], v_alpha);
      _mm512_mask_storeu_ps(to, masks[j], value);
    }
  }
}

// vdpbf16ps's flush of a subnormal result to zero (sign kept).
inline float flush_subnormal(float x) {
  return std::fabs(x) < FLT_MIN ? std::copysign(0.0f, x) : x;
}
inline float bf16_word_to_float(uint32_t bits) {
  float out;
  std::memcpy(&out, &bits, sizeof(out));
  return out;
}

void tile_portable(int64_t pairs, const uint32_t* a, const uint32_t* b, float alpha, float beta,
                   float* c, int64_t ldc, int64_t rows, int64_t cols) {
  float acc[kTileRows][kTileCols] = {};
  for (int64_t q = 0; q < pairs; ++q) {
    float b_lo[kTileCols], b_hi[kTileCols];
    for (int64_t j = 0; j < kTileCols; ++j) {
      b_lo[j] = bf16_word_to_float(b[q * kTileCols + j] << 16);
      b_hi[j] = bf16_word_to_float(b[q * kTileCols + j] & 0xffff0000u);
    }
    for (int64_t i = 0; i < kTileRows; ++i) {
      const float a_lo = bf16_word_to_float(a[q * kTileRows + i] << 16);
      const float a_hi = bf16_word_to_float(a[q * kTileRows + i] & 0xffff0000u);
      for (int64_t j = 0; j < kTileCols; ++j) {  // the odd element of the pair first
        const float odd = flush_subnormal(std::fma(a_hi, b_hi[j], acc[i][j]));
        acc[i][j] = flush_subnormal(std::fma(a_lo, b_lo[j], odd));
      }
    }
  }
  const bool read_c = beta != 0.0f;
  for (int64_t i = 0; i < rows; ++i) {
    for (int64_t j = 0; j < cols; ++j) {
      float& to = c[i * ldc + j];
      to = read_c ? std::fma(acc[i][j], alpha, to * beta) : acc[i][j] * alpha;
    }
  }
}

// C block (rows × cols at c) from a packed A block and B micro-panels, B micro-panel outermost.
void multiply_block(TileFn tile, const uint32_t* a_block, int64_t rows, const uint32_t* b_panels,
                    int64_t cols, int64_t pairs, float alpha, float beta, float* c, int64_t ldc) {
  for (int64_t j = 0; j < cols; j += kTileCols) {
    const uint32_t* b_panel = b_panels + j / kTileCols * kTileCols * pairs;
    for (int64_t i = 0; i < rows; i += kTileRows) {
      tile(pairs, a_block + i * pairs, b_panel, alpha, beta, c + i * ldc + j, ldc,
           std::min(kTileRows, rows - i), std::min(kTileCols, cols - j));
    }
  }
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

TileFn tile_function() {
  return g_path == Bf16Path::kBest && gemm_bf16_dpbf16_available() ? &tile_dpbf16 : &tile_portable;
}

// The product into an fp32 C (k > 0, alpha != 0).
void gemm_f32_c(bool a_t, bool b_t, int64_t m, int64_t n, int64_t k, float alpha, ConstFloats a,
                int64_t lda, ConstFloats b, int64_t ldb, float beta, float* c, int64_t ldc,
                Workspace& ws) {
  const TileFn tile = tile_function();
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
  const int64_t pairs_max = ceil_div(std::min(k, kBlockK), 2);
  const int64_t a_words = block_m * pairs_max;
  uint32_t* b_panel = reserve(ws.b_panel, ws.b_capacity, panels_max * kTileCols * pairs_max);
  uint32_t* a_blocks = reserve(ws.a_blocks, ws.a_capacity, threads * a_words);

  const auto work = [&](int64_t index, int64_t count) {
    uint32_t* a_block = a_blocks + index * a_words;
    for (int64_t j0 = 0; j0 < n; j0 += kBlockN) {
      const int64_t panels = ceil_div(std::min(kBlockN, n - j0), kTileCols);
      for (int64_t p0 = 0; p0 < k; p0 += kBlockK) {
        const int64_t depth = std::min(kBlockK, k - p0);
        const int64_t pairs = ceil_div(depth, 2);
        const float beta_block = p0 == 0 ? beta : 1.0f;
        const int64_t q_first = gemm_share(panels, index, count);
        const int64_t q_last = gemm_share(panels, index + 1, count);
        if (q_first < q_last) {
          const int64_t j = j0 + q_first * kTileCols;
          pack<kTileCols>(b, ldb, b_t, j, p0, std::min(n - j, (q_last - q_first) * kTileCols),
                          depth, b_panel + q_first * kTileCols * pairs);
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
                               pack<kTileRows>(a, lda, !a_t, i0, p0, rows, depth, a_block);
                               packed_block = block;
                             }
                             const int64_t j = j0 + q_begin * kTileCols;
                             multiply_block(tile, a_block, rows,
                                            b_panel + q_begin * kTileCols * pairs,
                                            std::min(n - j, (q_end - q_begin) * kTileCols), pairs,
                                            alpha, beta_block, c + i0 * ldc + j, ldc);
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

bool gemm_bf16_dpbf16_available() {
  static const bool available =
      __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512bf16");
  return available;
}

const char* gemm_bf16_kernel_name() {
  return tile_function() == &tile_dpbf16 ? "avx512_bf16" : "portable";
}

}  // namespace maxctx::kernels::cpu

// The SIMD work of one cpu attention tile: the tile products and the softmax row passes,
// compiled for every x86 target Highway attains and dispatched at run time.
//
// Internal to kernels/cpu: attention.cpp owns the tiling, masks and threads of the flash
// kernel; single_query_attention.cpp uses the softmax step for its score blocks. The tile GEMM
// is not a general SGEMM: no cache blocking, no threads, B given k-major (rows of N contiguous
// floats). It exists because OpenBLAS 0.3.21 has no Zen 5 kernel: its best (SkylakeX/Cooperlake)
// reaches about 0.45 of this core's FMA peak, at 1024³ and on a 256×128×128 tile alike, where
// this one reaches about 0.95 on cache-resident tiles (bench/kernels measures both). Score rows
// have a leading dimension and a width that are multiples of kAttentionScoreAlign floats; the
// row passes rely on it.
#pragma once

#include <cstdint>

#include "maxctx/core/dtype.h"

namespace maxctx::kernels::cpu {

// Score rows are padded to 64 bytes: whole vectors on every x86 target (4, 8 or 16 floats).
inline constexpr int64_t kAttentionScoreAlign = 16;

// C = alpha · A · B (accumulate = false; C is not read) or C += alpha · A · B, where
//   A is M×K: a[m·lda + k], or with a_transposed, stored as its transpose: a[k·lda + m];
//   B is K×N: b[k·ldb + n];  C is M×N: c[m·ldc + n].
// Any M, N, K >= 0; loads and stores past N are masked, so rows need no padding.
void attention_tile_gemm(int64_t m, int64_t n, int64_t k, float alpha, const float* a, int64_t lda,
                         bool a_transposed, const float* b, int64_t ldb, bool accumulate, float* c,
                         int64_t ldc);

// score (rows, ld): columns [keys, width) become -inf; with a mask (tokens, ld) of 0 / -inf,
// row r also gets mask row r % tokens added (rows are heads × tokens, head-major).
void attention_mask_scores(float* score, int64_t ld, int64_t rows, int64_t keys, int64_t width,
                           const float* mask, int64_t tokens);

// One online-softmax step over a masked score tile (rows, ld), `width` columns live: updates the
// running max m and sum l of each row, rescales the row's output accumulator acc (rows, dim)
// when m grows, and turns the scores into exp(score - m). Rows that have seen no key yet stay
// at m = -inf, l = 0, with zero probabilities.
void attention_softmax_step(float* score, int64_t ld, int64_t rows, int64_t width, float* row_max,
                            float* row_sum, float* acc, int64_t dim);

// Backward of the softmax over a masked score tile: prob = exp(score - lse) (0 for rows with
// lse = -inf), then d_score = prob · (d_score - delta) in place; both (rows, ld).
void attention_softmax_backward(float* prob, float* d_score, int64_t ld, int64_t rows,
                                int64_t width, const float* lse, const float* delta);

// ---- bf16 tile products (q, k, v in bf16: kernels.h's precision contract)
// One sequence of roundings, AMX's TDPBF16PS (measured on Sapphire Rapids, bit for bit: see
// tests/attention/bf16_attention_test.cpp), on every CPU. K runs in chunks of kBf16ChunkPairs
// pairs of bf16 (a tile's depth), the last chunk padded with zero pairs. Per output and chunk:
//   even = odd = +0;  for each pair p of the chunk, in order:
//     even = fma(a[2p], b[2p], even);  odd = fma(a[2p+1], b[2p+1], odd)
//   sum = sum + (even + odd)                       (sum starts at +0, before the first chunk)
// every operation fp32, round to nearest even, bf16 inputs that are denormal read as zero and
// results that come out denormal flushed to a zero of their sign (the instruction's DAZ/FTZ).
// A pad pair adds +0·+0: it only turns a -0 lane sum into +0. Then c = alpha·sum, or with
// accumulate c = fma(alpha, sum, c). With AMX (and the kernel's permission to use it) the tiles
// run on TDPBF16PS; elsewhere, or with attention_bf16_force_portable(true), a portable path runs
// the same sequence in fp32 FMAs: the same bits. (AVX512_BF16's vdpbf16ps adds each product to
// one running sum, odd then even: another sequence, so it is not used.)
inline constexpr int64_t kBf16ChunkPairs = 16;

// B operands are packed in panels of kBf16Panel columns: per panel,
// attention_bf16_panel_pairs(k) rows of kBf16Panel 32-bit words, word (p, n) = b[2p][n] |
// b[2p + 1][n] << 16 (0 past k and n): AMX's B tile layout (16 pairs × 16 columns, rows 128
// bytes apart) and the portable path's rows.
inline constexpr int64_t kBf16Panel = 32;
// ceil(k / 2) rounded up to whole chunks.
int64_t attention_bf16_panel_pairs(int64_t k);
int64_t attention_bf16_packed_words(int64_t k, int64_t n);

// packed = B (k, n) = srcᵀ for src (n, k) with rows ld elements apart (K or V rows).
void attention_pack_bf16_transposed(uint32_t* packed, const bf16* src, int64_t n, int64_t k,
                                    int64_t ld);

// C (m, n) = alpha · A · B, or C += alpha · A · B. A (m, k) row-major bf16, lda even (a[i][k] of
// an odd k is read as +0). B is b_packed (attention_pack_bf16_transposed) when that is not null,
// else b (k, n) row-major, rows ldb apart. Loads and stores past n are masked.
void attention_tile_gemm_bf16(int64_t m, int64_t n, int64_t k, float alpha, const bf16* a,
                              int64_t lda, const bf16* b, int64_t ldb, const uint32_t* b_packed,
                              bool accumulate, float* c, int64_t ldc);

// dst[i] = float_to_bf16(src[i]) for i < n (the same bits, vectorized).
void attention_round_to_bf16(bf16* dst, const float* src, int64_t n);

// Tests: run the portable bf16 products even where AMX exists (process-wide).
void attention_bf16_force_portable(bool portable);
// Whether the bf16 products run on AMX (the CPU has it, the OS lets this process use it, and the
// portable path is not forced).
bool attention_bf16_amx();

// Highway's name of the target the calls above dispatch to ("AVX3_DL", "AVX2", ...).
const char* attention_simd_target();

}  // namespace maxctx::kernels::cpu

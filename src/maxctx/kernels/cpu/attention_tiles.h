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

// Highway's name of the target the calls above dispatch to ("AVX3_DL", "AVX2", ...).
const char* attention_simd_target();

}  // namespace maxctx::kernels::cpu

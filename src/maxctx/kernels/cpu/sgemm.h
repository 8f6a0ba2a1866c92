// The project's own fp32 GEMM: C = alpha · op(A) · op(B) + beta · C, row-major, BLAS semantics.
//
// It exists because OpenBLAS 0.3.21 has no Zen 5 kernel and reaches about 0.46 of this core's
// FMA peak; this one is Goto/BLIS-style (packed panels, register micro-tiles, Highway with
// dynamic dispatch, so AVX-512 runs although the baseline is AVX2). Threads split C into
// blocks and never split K: every element of C is the same sequence of roundings whatever the
// thread count, so results are bit-identical for 1, 2, ... threads. Not a BLAS: no complex, no
// double, no column-major entry point.
#pragma once

#include <cstdint>

namespace maxctx::kernels::cpu {

enum class Transpose : bool { kNo = false, kYes = true };

// C (m×n, c[i·ldc + j]) = alpha · op(A) · op(B) + beta · C, where
//   op(A) is m×k: A stored m×k (a[i·lda + p], lda >= k), or with kYes k×m (a[p·lda + i], lda >= m);
//   op(B) is k×n: B stored k×n (b[p·ldb + j], ldb >= n), or with kYes n×k (b[j·ldb + p], ldb >= k).
// beta == 0 does not read C (it may hold NaN); alpha == 0 or k == 0 only scales C by beta.
// Runs on omp_get_max_threads() threads (one inside a parallel region). Buffers must not alias C.
void sgemm(Transpose trans_a, Transpose trans_b, int64_t m, int64_t n, int64_t k, float alpha,
           const float* a, int64_t lda, const float* b, int64_t ldb, float beta, float* c,
           int64_t ldc);

// Highway's name of the target sgemm dispatches to ("AVX3_DL", "AVX2", ...).
const char* sgemm_simd_target();

}  // namespace maxctx::kernels::cpu

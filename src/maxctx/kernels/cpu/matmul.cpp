// Fast matmul: three GEMMs, row-major, the transposes doing the layout work.
//   forward   out[N,O]   = in[N,I] · W[O,I]ᵀ          (NoTrans, Trans)
//   d_in      d_in[N,I]  = d_out[N,O] · W[O,I]         (NoTrans, NoTrans), beta 0 or 1
//   d_weight  d_W[O,I]  += d_out[N,O]ᵀ · in[N,I]       (Trans, NoTrans), beta 1
// All on the project's SGEMM (kernels/cpu/sgemm.h) but the tiniest products, where OpenBLAS
// measured faster (see gemm below), and the forward of one token row, a matrix-vector product
// that streams the weights once (kernels/cpu/gemv.h: decode). Empty sums (in_dim or out_dim 0)
// follow sgemm's K = 0 rule: the output becomes beta · itself.
#include "maxctx/kernels/cpu/matmul.h"

#include <cblas.h>

#include <algorithm>

#include "maxctx/kernels/cpu/gemv.h"
#include "maxctx/kernels/cpu/sgemm.h"

namespace maxctx::kernels::cpu {
namespace {

// A leading dimension for a possibly empty matrix (BLAS rules ask for >= 1 even then).
int64_t ld(int64_t cols) { return std::max<int64_t>(1, cols); }

// Measured on one Zen 5 core, one thread, both in the same run, GFLOP/s (sgemm / OpenBLAS
// 0.3.21): 1024³ 219 / 114; the model's 2048-row projections, forward and both backward
// products, 200-225 / 105-117; 64³ 150-190 / 96-106; 32³ 97-159 / 70-90; but 16³ 38-54 /
// 47-57 and 8³ 7-10 / 15. Below 24³ multiply-adds packing costs more than it saves, so those go
// to OpenBLAS, which runs them on one thread (its threshold is 64³): still the same bits for any
// thread count. OpenBLAS is also 5-33% faster on backward products over 1-4 token rows
// (d_weight 1536×512×1: 19 / 14); they stay on sgemm, since there OpenBLAS would fork and its
// bits could depend on the thread count, and training never has so few rows.
constexpr int64_t kMinSgemmFmas = int64_t{24} * 24 * 24;

// C (m×n) = op(A) · op(B) + beta · C over dense row-major operands.
void gemm(Transpose trans_a, Transpose trans_b, int64_t m, int64_t n, int64_t k, const float* a,
          const float* b, float beta, float* c) {
  const int64_t lda = ld(trans_a == Transpose::kYes ? m : k);
  const int64_t ldb = ld(trans_b == Transpose::kYes ? k : n);
  const int64_t fmas = m * n * k;
  if (fmas > 0 && fmas < kMinSgemmFmas) {  // each dimension is below 24³, so fits an int
    cblas_sgemm(CblasRowMajor, trans_a == Transpose::kYes ? CblasTrans : CblasNoTrans,
                trans_b == Transpose::kYes ? CblasTrans : CblasNoTrans, static_cast<int>(m),
                static_cast<int>(n), static_cast<int>(k), 1.0f, a, static_cast<int>(lda), b,
                static_cast<int>(ldb), beta, c, static_cast<int>(n));
    return;
  }
  sgemm(trans_a, trans_b, m, n, k, 1.0f, a, lda, b, ldb, beta, c, ld(n));
}

void backward(float* d_in, float* d_weight, const float* d_out, const float* in,
              const float* weight, int64_t N, int64_t in_dim, int64_t out_dim, float beta_in) {
  if (d_in != nullptr) {
    gemm(Transpose::kNo, Transpose::kNo, N, in_dim, out_dim, d_out, weight, beta_in, d_in);
  }
  gemm(Transpose::kYes, Transpose::kNo, out_dim, in_dim, N, d_out, in, 1.0f, d_weight);
}

}  // namespace

void matmul_forward(float* out, const float* in, const float* weight, int64_t N, int64_t in_dim,
                    int64_t out_dim) {
  if (N == 1) return gemv_forward(out, in, weight, in_dim, out_dim);
  gemm(Transpose::kNo, Transpose::kYes, N, out_dim, in_dim, in, weight, 0.0f, out);
}

void matmul_backward(float* d_in, float* d_weight, const float* d_out, const float* in,
                     const float* weight, int64_t N, int64_t in_dim, int64_t out_dim) {
  backward(d_in, d_weight, d_out, in, weight, N, in_dim, out_dim, 0.0f);
}

void matmul_backward_accumulate_input(float* d_in, float* d_weight, const float* d_out,
                                      const float* in, const float* weight, int64_t N,
                                      int64_t in_dim, int64_t out_dim) {
  backward(d_in, d_weight, d_out, in, weight, N, in_dim, out_dim, 1.0f);
}

}  // namespace maxctx::kernels::cpu

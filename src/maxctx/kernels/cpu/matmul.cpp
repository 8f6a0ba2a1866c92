// Fast matmul: three cblas_sgemm calls, row-major, the transposes doing the layout work.
//   forward   out[N,O]   = in[N,I] · W[O,I]ᵀ          (NoTrans, Trans)
//   d_in      d_in[N,I]  = d_out[N,O] · W[O,I]         (NoTrans, NoTrans), beta 0 or 1
//   d_weight  d_W[O,I]  += d_out[N,O]ᵀ · in[N,I]       (Trans, NoTrans), beta 1
#include "maxctx/kernels/cpu/matmul.h"

#include <cblas.h>

#include <algorithm>
#include <climits>

#include "maxctx/core/check.h"

namespace maxctx::kernels::cpu {
namespace {

int blas_dim(int64_t dim, const char* name) {
  MAXCTX_CHECK(dim >= 0 && dim <= INT_MAX, "{} = {} does not fit a BLAS int: allowed 0..{}", name,
               dim, INT_MAX);
  return static_cast<int>(dim);
}

void backward(float* d_in, float* d_weight, const float* d_out, const float* in,
              const float* weight, int64_t N, int64_t in_dim, int64_t out_dim, float beta_in) {
  const int n = blas_dim(N, "N");
  const int i = blas_dim(in_dim, "in_dim");
  const int o = blas_dim(out_dim, "out_dim");
  if (n == 0 || i == 0) return;
  if (o == 0) {  // an empty sum: BLAS would reject the zero leading dimension
    if (d_in != nullptr && beta_in == 0.0f) std::fill(d_in, d_in + N * in_dim, 0.0f);
    return;
  }
  if (d_in != nullptr) {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, i, o, 1.0f, d_out, o, weight, i,
                beta_in, d_in, i);
  }
  cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, o, i, n, 1.0f, d_out, o, in, i, 1.0f,
              d_weight, i);
}

}  // namespace

void matmul_forward(float* out, const float* in, const float* weight, int64_t N, int64_t in_dim,
                    int64_t out_dim) {
  const int n = blas_dim(N, "N");
  const int i = blas_dim(in_dim, "in_dim");
  const int o = blas_dim(out_dim, "out_dim");
  if (n == 0 || o == 0) return;
  if (i == 0) {  // an empty sum: BLAS would reject the zero leading dimension
    std::fill(out, out + N * out_dim, 0.0f);
    return;
  }
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, n, o, i, 1.0f, in, i, weight, i, 0.0f, out,
              o);
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

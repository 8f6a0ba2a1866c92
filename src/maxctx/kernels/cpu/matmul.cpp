// Fast matmul: three calls of the project's SGEMM (kernels/cpu/sgemm.h), row-major, the
// transposes doing the layout work.
//   forward   out[N,O]   = in[N,I] · W[O,I]ᵀ          (NoTrans, Trans)
//   d_in      d_in[N,I]  = d_out[N,O] · W[O,I]         (NoTrans, NoTrans), beta 0 or 1
//   d_weight  d_W[O,I]  += d_out[N,O]ᵀ · in[N,I]       (Trans, NoTrans), beta 1
// Not OpenBLAS: 0.3.21 has no Zen 5 kernel, and on one core of this machine the SGEMM here is
// 1.6–1.9x faster on every model shape measured (179 vs 113 GFLOP/s at 1024³; 160–198 vs
// 100–111 on the maxctx-20m projections, forward and both backward products).
#include "maxctx/kernels/cpu/matmul.h"

#include <algorithm>

#include "maxctx/kernels/cpu/sgemm.h"

namespace maxctx::kernels::cpu {
namespace {

// A leading dimension for a possibly empty matrix (BLAS rules ask for >= 1 even then).
int64_t ld(int64_t cols) { return std::max<int64_t>(1, cols); }

void backward(float* d_in, float* d_weight, const float* d_out, const float* in,
              const float* weight, int64_t N, int64_t in_dim, int64_t out_dim, float beta_in) {
  if (d_in != nullptr) {
    sgemm(Transpose::kNo, Transpose::kNo, N, in_dim, out_dim, 1.0f, d_out, ld(out_dim), weight,
          ld(in_dim), beta_in, d_in, ld(in_dim));
  }
  sgemm(Transpose::kYes, Transpose::kNo, out_dim, in_dim, N, 1.0f, d_out, ld(out_dim), in,
        ld(in_dim), 1.0f, d_weight, ld(in_dim));
}

}  // namespace

void matmul_forward(float* out, const float* in, const float* weight, int64_t N, int64_t in_dim,
                    int64_t out_dim) {
  sgemm(Transpose::kNo, Transpose::kYes, N, out_dim, in_dim, 1.0f, in, ld(in_dim), weight,
        ld(in_dim), 0.0f, out, ld(out_dim));
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

// Fast matmul: three GEMMs, row-major, the transposes doing the layout work.
//   forward   out[N,O]   = in[N,I] · W[O,I]ᵀ          (NoTrans, Trans)
//   d_in      d_in[N,I]  = d_out[N,O] · W[O,I]         (NoTrans, NoTrans), beta 0 or 1
//   d_weight  d_W[O,I]  += d_out[N,O]ᵀ · in[N,I]       (Trans, NoTrans), beta 1
// All on the project's SGEMM (kernels/cpu/sgemm.h) but the tiniest products, where OpenBLAS
// measured faster (see gemm below), and the forward of one token row, a matrix-vector product
// that streams the weights once (kernels/cpu/gemv.h: decode). Empty sums (in_dim or out_dim 0)
// follow sgemm's K = 0 rule: the output becomes beta · itself.
// The mixed-precision overloads (matmul.h) choose between gemm_bf16 and these fp32 functions.
#include "maxctx/kernels/cpu/matmul.h"

#include <cblas.h>

#include <algorithm>
#include <span>
#include <vector>

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

// fp32 views of float arrays for the fp32 path: an f32 array is used in place, a bf16 one widened
// (exactly) into this thread's scratch; an f32 view of a bf16 output is written back rounded.
struct Scratch {
  std::vector<float> weight, in, d_out, out;
};
Scratch& scratch() {
  static thread_local Scratch s;
  return s;
}

const float* as_f32(ConstFloats x, int64_t numel, std::vector<float>& buffer) {
  if (x.dtype == DType::kF32) return static_cast<const float*>(x.data);
  buffer.resize(static_cast<size_t>(numel));
  convert_bf16_to_f32({static_cast<const bf16*>(x.data), buffer.size()}, buffer);
  return buffer.data();
}
// `accumulate`: the fp32 view starts as the widened output (for +=).
float* f32_output(Floats x, int64_t numel, bool accumulate, std::vector<float>& buffer) {
  if (x.dtype == DType::kF32) return static_cast<float*>(x.data);
  if (accumulate) return const_cast<float*>(as_f32({x.data, x.dtype}, numel, buffer));
  buffer.resize(static_cast<size_t>(numel));
  return buffer.data();
}
void write_back(Floats x, const float* value, int64_t numel) {
  if (x.dtype == DType::kF32) return;
  convert_f32_to_bf16({value, static_cast<size_t>(numel)},
                      {static_cast<bf16*>(x.data), static_cast<size_t>(numel)});
}

void mixed_backward(Floats d_in, float* d_weight, ConstFloats d_out, ConstFloats in,
                    ConstFloats weight, int64_t N, int64_t in_dim, int64_t out_dim, float beta_in) {
  if (in.dtype == DType::kBF16) {
    if (d_in.data != nullptr) {
      gemm_bf16(Transpose::kNo, Transpose::kNo, N, in_dim, out_dim, 1.0f, d_out, ld(out_dim),
                weight, ld(in_dim), beta_in, d_in, ld(in_dim));
    }
    gemm_bf16(Transpose::kYes, Transpose::kNo, out_dim, in_dim, N, 1.0f, d_out, ld(out_dim), in,
              ld(in_dim), 1.0f, {d_weight, DType::kF32}, ld(in_dim));
    return;
  }
  Scratch& s = scratch();
  float* d_in_f32 =
      d_in.data == nullptr ? nullptr : f32_output(d_in, N * in_dim, beta_in != 0.0f, s.out);
  backward(d_in_f32, d_weight, as_f32(d_out, N * out_dim, s.d_out),
           static_cast<const float*>(in.data), as_f32(weight, out_dim * in_dim, s.weight), N,
           in_dim, out_dim, beta_in);
  if (d_in_f32 != nullptr) write_back(d_in, d_in_f32, N * in_dim);
}

}  // namespace

void matmul_forward(Floats out, ConstFloats in, ConstFloats weight, int64_t N, int64_t in_dim,
                    int64_t out_dim) {
  Scratch& s = scratch();
  if (N == 1 && weight.dtype == DType::kBF16) {  // decode: stream the bf16 weight once
    float* out_f32 = f32_output(out, out_dim, false, s.out);
    gemv_forward_bf16(out_f32, as_f32(in, in_dim, s.in), static_cast<const bf16*>(weight.data),
                      in_dim, out_dim);
    return write_back(out, out_f32, out_dim);
  }
  if (in.dtype == DType::kBF16) {
    return gemm_bf16(Transpose::kNo, Transpose::kYes, N, out_dim, in_dim, 1.0f, in, ld(in_dim),
                     weight, ld(in_dim), 0.0f, out, ld(out_dim));
  }
  float* out_f32 = f32_output(out, N * out_dim, false, s.out);
  matmul_forward(out_f32, static_cast<const float*>(in.data),
                 as_f32(weight, out_dim * in_dim, s.weight), N, in_dim, out_dim);
  write_back(out, out_f32, N * out_dim);
}

void matmul_backward(Floats d_in, float* d_weight, ConstFloats d_out, ConstFloats in,
                     ConstFloats weight, int64_t N, int64_t in_dim, int64_t out_dim) {
  mixed_backward(d_in, d_weight, d_out, in, weight, N, in_dim, out_dim, 0.0f);
}

void matmul_backward_accumulate_input(Floats d_in, float* d_weight, ConstFloats d_out,
                                      ConstFloats in, ConstFloats weight, int64_t N, int64_t in_dim,
                                      int64_t out_dim) {
  mixed_backward(d_in, d_weight, d_out, in, weight, N, in_dim, out_dim, 1.0f);
}

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

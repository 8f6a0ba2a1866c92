// cuBLASLt GEMMs on stream 0. Row-major (rows, cols) matrices are cuBLASLt's column-major
// (cols, rows) with the same leading dimension, so each product is written transposed:
//   out = in·Wᵀ       →  outᶜ (out, N)  = Wᶜᵀ (out, in) · inᶜ (in, N)
//   d_in = d_out·W    →  d_inᶜ (in, N)  = Wᶜ (in, out) · d_outᶜ (out, N)
//   dW += d_outᵀ·in   →  dWᶜ (in, out) += inᶜ (in, N) · d_outᶜᵀ (N, out)
// A matmul descriptor, the layouts and the heuristic's algorithm are cached per shape, dtypes,
// beta and the operands' pointer alignment (a view into the middle of a buffer may be less
// aligned than cuBLASLt's default assumption of 256 bytes).
#include <cstdio>
#include <cstring>
#include <map>
#include <mutex>
#include <tuple>

#include "maxctx/kernels/cuda/allocator.h"
#include "maxctx/kernels/cuda/cuda_check.h"
#include "maxctx/kernels/cuda/gemm.h"
#include "maxctx/kernels/cuda/ops.h"

namespace maxctx::kernels::cuda {
namespace {

constexpr size_t kWorkspaceBytes = size_t{32} << 20;

struct GemmShape {
  bool trans_a, trans_b;
  int64_t m, n, k, lda, ldb, ldc;
  cudaDataType_t ab_type, c_type;
  bool accumulate;  // beta = 1
  uint32_t align_a, align_b, align_c;
  auto key() const {
    return std::make_tuple(trans_a, trans_b, m, n, k, lda, ldb, ldc, static_cast<int>(ab_type),
                           static_cast<int>(c_type), accumulate, align_a, align_b, align_c);
  }
  bool operator<(const GemmShape& other) const { return key() < other.key(); }
};

struct GemmPlan {
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
  cublasLtMatmulAlgo_t algo{};
};

uint32_t alignment_of(const void* pointer) {
  const auto address = reinterpret_cast<uintptr_t>(pointer);
  uint32_t alignment = 256;
  while (alignment > 1 && address % alignment != 0) alignment /= 2;
  return alignment;
}

cublasLtHandle_t lt_handle() {
  static cublasLtHandle_t handle = [] {
    cublasLtHandle_t h = nullptr;
    MAXCTX_CUBLAS_CHECK(cublasLtCreate(&h));
    return h;
  }();
  return handle;
}

GemmPlan make_plan(const GemmShape& s) {
  GemmPlan plan;
  MAXCTX_CUBLAS_CHECK(cublasLtMatmulDescCreate(&plan.desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  const cublasOperation_t op_a = s.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t op_b = s.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  MAXCTX_CUBLAS_CHECK(
      cublasLtMatmulDescSetAttribute(plan.desc, CUBLASLT_MATMUL_DESC_TRANSA, &op_a, sizeof op_a));
  MAXCTX_CUBLAS_CHECK(
      cublasLtMatmulDescSetAttribute(plan.desc, CUBLASLT_MATMUL_DESC_TRANSB, &op_b, sizeof op_b));
  // Stored shapes: A is (m, k) or, transposed, (k, m); B (k, n) or (n, k); C (m, n).
  MAXCTX_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&plan.a, s.ab_type, s.trans_a ? s.k : s.m,
                                                 s.trans_a ? s.m : s.k, s.lda));
  MAXCTX_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&plan.b, s.ab_type, s.trans_b ? s.n : s.k,
                                                 s.trans_b ? s.k : s.n, s.ldb));
  MAXCTX_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&plan.c, s.c_type, s.m, s.n, s.ldc));
  cublasLtMatmulPreference_t pref = nullptr;
  MAXCTX_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
  const size_t workspace = kWorkspaceBytes;
  MAXCTX_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(
      pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &workspace, sizeof workspace));
  const std::pair<cublasLtMatmulPreferenceAttributes_t, uint32_t> alignments[] = {
      {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, s.align_a},
      {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, s.align_b},
      {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, s.align_c},
      {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, s.align_c}};
  for (const auto& [attribute, value] : alignments) {
    MAXCTX_CUBLAS_CHECK(
        cublasLtMatmulPreferenceSetAttribute(pref, attribute, &value, sizeof value));
  }
  cublasLtMatmulHeuristicResult_t result{};
  int found = 0;
  MAXCTX_CUBLAS_CHECK(cublasLtMatmulAlgoGetHeuristic(lt_handle(), plan.desc, plan.a, plan.b, plan.c,
                                                     plan.c, pref, 1, &result, &found));
  MAXCTX_CUBLAS_CHECK(cublasLtMatmulPreferenceDestroy(pref));
  if (found == 0) {
    char message[160];
    std::snprintf(message, sizeof message,
                  "cuda: cuBLASLt has no algorithm for a %lldx%lldx%lld matmul of these dtypes and "
                  "alignments",
                  static_cast<long long>(s.m), static_cast<long long>(s.n),
                  static_cast<long long>(s.k));
    cuda_error(message);
  }
  plan.algo = result.algo;
  return plan;
}

// D = A·B (+ C when accumulate), C and D one matrix.
void lt_matmul(GemmShape s, const void* a, const void* b, void* c) {
  if (s.m == 0 || s.n == 0) return;
  const size_t c_element = s.c_type == CUDA_R_32F ? 4 : 2;
  if (s.k == 0) {  // an empty sum: D = 0, or C unchanged
    if (!s.accumulate) {
      MAXCTX_CUDA_CHECK(cudaMemset2D(c, s.ldc * c_element, 0, s.m * c_element, s.n));
    }
    return;
  }
  s.align_a = alignment_of(a);
  s.align_b = alignment_of(b);
  s.align_c = alignment_of(c);
  static std::mutex mutex;
  static std::map<GemmShape, GemmPlan> plans;
  GemmPlan plan;
  {
    const std::lock_guard<std::mutex> lock(mutex);
    auto it = plans.find(s);
    if (it == plans.end()) it = plans.emplace(s, make_plan(s)).first;
    plan = it->second;
  }
  const float alpha = 1.0f, beta = s.accumulate ? 1.0f : 0.0f;
  void* workspace = scratch(Scratch::kWorkspace, kWorkspaceBytes);
  MAXCTX_CUBLAS_CHECK(cublasLtMatmul(lt_handle(), plan.desc, &alpha, a, plan.a, b, plan.b, &beta, c,
                                     plan.c, c, plan.c, &plan.algo, workspace, kWorkspaceBytes,
                                     /*stream=*/0));
}

// `x` (n elements) as the product dtype: itself, or converted into `slot`.
const void* as_dtype(ConstDeviceFloats x, int64_t n, bool bf16, Scratch slot) {
  if (x.bf16 == bf16) return x.data;
  void* converted = scratch(slot, static_cast<size_t>(n) * (bf16 ? 2 : 4));
  convert(DeviceFloats{converted, bf16}, x, n);
  return converted;
}

cudaDataType_t data_type(bool bf16) { return bf16 ? CUDA_R_16BF : CUDA_R_32F; }

// D in `out`'s dtype when the products allow it (bf16 products write f32 or bf16; fp32 products
// only f32): otherwise an f32 staging matrix, rounded into `out` once at the end.
void product_into(DeviceFloats out, int64_t numel, bool bf16_products, bool accumulate, GemmShape s,
                  const void* a, const void* b) {
  s.ab_type = data_type(bf16_products);
  s.accumulate = accumulate;
  if (bf16_products || !out.bf16) {
    s.c_type = data_type(out.bf16);
    lt_matmul(s, a, b, out.data);
    return;
  }
  auto* staging = static_cast<float*>(scratch(Scratch::kGemmOut, static_cast<size_t>(numel) * 4));
  if (accumulate) convert(DeviceFloats{staging, false}, out, numel);
  s.c_type = CUDA_R_32F;
  lt_matmul(s, a, b, staging);
  convert(out, ConstDeviceFloats{staging, false}, numel);
}

}  // namespace

void matmul_forward(DeviceFloats out, ConstDeviceFloats in, ConstDeviceFloats weight, int64_t N,
                    int64_t in_dim, int64_t out_dim) {
  const bool bf16 = in.bf16;
  const void* w = as_dtype(weight, out_dim * in_dim, bf16, Scratch::kGemmB);
  GemmShape s{};
  s.trans_a = true;
  s.trans_b = false;
  s.m = out_dim, s.n = N, s.k = in_dim, s.lda = in_dim, s.ldb = in_dim, s.ldc = out_dim;
  product_into(out, N * out_dim, bf16, /*accumulate=*/false, s, w, in.data);
}

void matmul_backward(DeviceFloats d_in, bool accumulate, float* d_weight, ConstDeviceFloats d_out,
                     ConstDeviceFloats in, ConstDeviceFloats weight, int64_t N, int64_t in_dim,
                     int64_t out_dim) {
  const bool bf16 = in.bf16;
  const void* g = as_dtype(d_out, N * out_dim, bf16, Scratch::kGemmA);
  if (d_in.data != nullptr) {
    const void* w = as_dtype(weight, out_dim * in_dim, bf16, Scratch::kGemmB);
    GemmShape s{};
    s.trans_a = false;
    s.trans_b = false;
    s.m = in_dim, s.n = N, s.k = out_dim, s.lda = in_dim, s.ldb = out_dim, s.ldc = in_dim;
    product_into(d_in, N * in_dim, bf16, accumulate, s, w, g);
  }
  GemmShape s{};
  s.trans_a = false;
  s.trans_b = true;
  s.m = in_dim, s.n = out_dim, s.k = N, s.lda = in_dim, s.ldb = out_dim, s.ldc = in_dim;
  product_into(DeviceFloats{d_weight, false}, out_dim * in_dim, bf16, /*accumulate=*/true, s,
               in.data, g);
}

}  // namespace maxctx::kernels::cuda

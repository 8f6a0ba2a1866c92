// Residual adds, scaling, f32 <-> bf16 conversion (kernels/ref/elementwise.h), and the sums of
// the readouts (kernel_ops.inc), written to device memory. Each element is read before it is
// written, so out may be an input.
#include "maxctx/kernels/cuda/allocator.h"
#include "maxctx/kernels/cuda/cuda_check.h"
#include "maxctx/kernels/cuda/device_float.cuh"
#include "maxctx/kernels/cuda/ops.h"

namespace maxctx::kernels::cuda {
namespace {

__global__ void add_kernel(DeviceFloats out, ConstDeviceFloats a, ConstDeviceFloats b, int64_t n) {
  MAXCTX_GRID_STRIDE(i, n) { store(out, i, load(a, i) + load(b, i)); }
}

__global__ void scale_kernel(DeviceFloats out, ConstDeviceFloats in, float alpha, int64_t n) {
  MAXCTX_GRID_STRIDE(i, n) { store(out, i, alpha * load(in, i)); }
}

__global__ void convert_kernel(DeviceFloats out, ConstDeviceFloats in, int64_t n) {
  MAXCTX_GRID_STRIDE(i, n) { store(out, i, load(in, i)); }
}

// A fixed grid of kReduceBlocks × kThreads: thread t sums elements t, t + stride, ... in order,
// then each block's tree; the partials are summed by one block in the same tree. The bits
// depend on n only, never on timing.
constexpr int kReduceBlocks = 512;

// Squared (kSquares) or plain (kValues) terms.
enum class Terms { kValues, kSquares };

template <Terms kTerms>
__global__ void sum_partials_of(ConstDeviceFloats x, int64_t n, double* partials) {
  __shared__ double shared[kThreads / 32];
  double sum = 0;
  MAXCTX_GRID_STRIDE(i, n) {
    const double value = load(x, i);
    sum += kTerms == Terms::kSquares ? value * value : value;
  }
  sum = block_sum(sum, shared);
  if (threadIdx.x == 0) partials[blockIdx.x] = sum;
}

__global__ void sum_partials(const double* partials, int count, double* total) {
  __shared__ double shared[kThreads / 32];
  double sum = 0;
  for (int i = threadIdx.x; i < count; i += blockDim.x) sum += partials[i];
  sum = block_sum(sum, shared);
  if (threadIdx.x == 0) *total = sum;
}

__global__ void set_zero_kernel(double* out) { *out = 0.0; }

__global__ void scale_by_ratio_kernel(DeviceFloats x, float divisor, float multiplier, int64_t n) {
  MAXCTX_GRID_STRIDE(i, n) { store(x, i, __fmul_rn(__fdiv_rn(load(x, i), divisor), multiplier)); }
}

// out[0] = the sum of x's terms: kReduceBlocks partials in scratch, then one block's tree.
template <Terms kTerms>
void sum_into(double* out, ConstDeviceFloats x, int64_t n) {
  if (n == 0) {
    set_zero_kernel<<<1, 1>>>(out);
    MAXCTX_CUDA_LAUNCHED("set_zero");
    return;
  }
  auto* partials = static_cast<double*>(scratch(Scratch::kReduce, kReduceBlocks * 8));
  sum_partials_of<kTerms><<<kReduceBlocks, kThreads>>>(x, n, partials);
  MAXCTX_CUDA_LAUNCHED("sum_partials_of");
  sum_partials<<<1, kThreads>>>(partials, kReduceBlocks, out);
  MAXCTX_CUDA_LAUNCHED("sum_partials");
}

}  // namespace

void zero_bytes(void* memory, size_t bytes) {
  if (bytes > 0) MAXCTX_CUDA_CHECK(cudaMemset(memory, 0, bytes));
}

void copy_bytes(void* dst, const void* src, size_t bytes) {
  if (bytes > 0) MAXCTX_CUDA_CHECK(cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToDevice));
}

void add(DeviceFloats out, ConstDeviceFloats a, ConstDeviceFloats b, int64_t n) {
  if (n == 0) return;
  add_kernel<<<grid_for(n), kThreads>>>(out, a, b, n);
  MAXCTX_CUDA_LAUNCHED("add");
}

void add_inplace(DeviceFloats acc, ConstDeviceFloats x, int64_t n) { add(acc, acc, x, n); }

void scale(DeviceFloats out, ConstDeviceFloats in, float alpha, int64_t n) {
  if (n == 0) return;
  scale_kernel<<<grid_for(n), kThreads>>>(out, in, alpha, n);
  MAXCTX_CUDA_LAUNCHED("scale");
}

void convert(DeviceFloats out, ConstDeviceFloats in, int64_t n) {
  if (n == 0) return;
  convert_kernel<<<grid_for(n), kThreads>>>(out, in, n);
  MAXCTX_CUDA_LAUNCHED("convert");
}

void sum_in_order(double* out, ConstDeviceFloats x, int64_t n) {
  sum_into<Terms::kValues>(out, x, n);
}

void sum_of_squares(double* out, ConstDeviceFloats x, int64_t n) {
  sum_into<Terms::kSquares>(out, x, n);
}

void scale_by_ratio(DeviceFloats x, int64_t n, float divisor, float multiplier) {
  if (n == 0) return;
  scale_by_ratio_kernel<<<grid_for(n), kThreads>>>(x, divisor, multiplier, n);
  MAXCTX_CUDA_LAUNCHED("scale_by_ratio");
}

}  // namespace maxctx::kernels::cuda

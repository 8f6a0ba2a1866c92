// Residual adds, scaling, f32 <-> bf16 conversion and the sum of squares (kernels/ref/
// elementwise.h). Each element is read before it is written, so out may be an input.
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

__global__ void sum_of_squares_partials(ConstDeviceFloats x, int64_t n, double* partials) {
  __shared__ double shared[kThreads / 32];
  double sum = 0;
  MAXCTX_GRID_STRIDE(i, n) {
    const double value = load(x, i);
    sum += value * value;
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

double sum_of_squares(ConstDeviceFloats x, int64_t n) {
  if (n == 0) return 0.0;
  auto* partials = static_cast<double*>(scratch(Scratch::kReduce, (kReduceBlocks + 1) * 8));
  sum_of_squares_partials<<<kReduceBlocks, kThreads>>>(x, n, partials);
  MAXCTX_CUDA_LAUNCHED("sum_of_squares_partials");
  sum_partials<<<1, kThreads>>>(partials, kReduceBlocks, partials + kReduceBlocks);
  MAXCTX_CUDA_LAUNCHED("sum_partials");
  double total = 0;
  MAXCTX_CUDA_CHECK(
      cudaMemcpy(&total, partials + kReduceBlocks, sizeof total, cudaMemcpyDeviceToHost));
  return total;
}

}  // namespace maxctx::kernels::cuda

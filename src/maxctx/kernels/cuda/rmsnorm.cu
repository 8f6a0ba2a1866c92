// RMSNorm (kernels/ref/rmsnorm.h): one block per row for the row sums; d_weight's sum over rows
// runs one thread per column over the rows in order, so it is deterministic without atomics.
#include "maxctx/kernels/cuda/cuda_check.h"
#include "maxctx/kernels/cuda/device_float.cuh"
#include "maxctx/kernels/cuda/ops.h"

namespace maxctx::kernels::cuda {
namespace {

__global__ void rmsnorm_forward_kernel(DeviceFloats out, float* rstd, ConstDeviceFloats in,
                                       ConstDeviceFloats weight, int64_t D, float eps) {
  __shared__ float shared[kThreads / 32];
  const int64_t row = blockIdx.x * D;
  float sum = 0;
  for (int64_t j = threadIdx.x; j < D; j += blockDim.x) {
    const float x = load(in, row + j);
    sum += x * x;
  }
  sum = block_sum(sum, shared);
  const float r = 1.0f / sqrtf(sum / static_cast<float>(D) + eps);
  for (int64_t j = threadIdx.x; j < D; j += blockDim.x) {
    store(out, row + j, load(in, row + j) * r * load(weight, j));
  }
  if (threadIdx.x == 0) rstd[blockIdx.x] = r;
}

__global__ void rmsnorm_d_in_kernel(DeviceFloats d_in, ConstDeviceFloats d_out,
                                    ConstDeviceFloats in, ConstDeviceFloats weight,
                                    const float* rstd, int64_t D) {
  __shared__ float shared[kThreads / 32];
  const int64_t row = blockIdx.x * D;
  const float r = rstd[blockIdx.x];
  float dot = 0;
  for (int64_t j = threadIdx.x; j < D; j += blockDim.x) {
    dot += load(d_out, row + j) * load(weight, j) * load(in, row + j);
  }
  dot = block_sum(dot, shared);
  const float coef = dot * r * r * r / static_cast<float>(D);
  // Every thread has read its row's elements above before any is written (in place is allowed
  // only as d_in == d_out, whose elements each thread reads and writes itself).
  for (int64_t j = threadIdx.x; j < D; j += blockDim.x) {
    const float g = load(d_out, row + j);
    store(d_in, row + j, r * load(weight, j) * g - coef * load(in, row + j));
  }
}

__global__ void rmsnorm_d_weight_kernel(float* d_weight, ConstDeviceFloats d_out,
                                        ConstDeviceFloats in, const float* rstd, int64_t N,
                                        int64_t D) {
  MAXCTX_GRID_STRIDE(j, D) {
    float acc = d_weight[j];
    for (int64_t n = 0; n < N; ++n) acc += load(d_out, n * D + j) * load(in, n * D + j) * rstd[n];
    d_weight[j] = acc;
  }
}

}  // namespace

void rmsnorm_forward(DeviceFloats out, float* rstd, ConstDeviceFloats in, ConstDeviceFloats weight,
                     int64_t N, int64_t D, float eps) {
  if (N == 0) return;
  rmsnorm_forward_kernel<<<row_grid(N), kThreads>>>(out, rstd, in, weight, D, eps);
  MAXCTX_CUDA_LAUNCHED("rmsnorm_forward");
}

void rmsnorm_backward(DeviceFloats d_in, float* d_weight, ConstDeviceFloats d_out,
                      ConstDeviceFloats in, ConstDeviceFloats weight, const float* rstd, int64_t N,
                      int64_t D) {
  if (N == 0) return;
  // d_weight first: d_in may be d_out (in place), which the d_weight sum still reads.
  rmsnorm_d_weight_kernel<<<grid_for(D), kThreads>>>(d_weight, d_out, in, rstd, N, D);
  MAXCTX_CUDA_LAUNCHED("rmsnorm_d_weight");
  rmsnorm_d_in_kernel<<<row_grid(N), kThreads>>>(d_in, d_out, in, weight, rstd, D);
  MAXCTX_CUDA_LAUNCHED("rmsnorm_d_in");
}

}  // namespace maxctx::kernels::cuda

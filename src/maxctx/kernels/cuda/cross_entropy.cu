// Masked softmax cross-entropy (kernels/ref/cross_entropy.h): one block per row for the max and
// the sum of exponentials; backward elementwise over (row, vocab).
#include "maxctx/kernels/cuda/cuda_check.h"
#include "maxctx/kernels/cuda/device_float.cuh"
#include "maxctx/kernels/cuda/ops.h"

namespace maxctx::kernels::cuda {
namespace {

__global__ void cross_entropy_forward_kernel(float* loss, float* lse, ConstDeviceFloats logits,
                                             const int32_t* targets, const float* weights,
                                             int64_t V) {
  __shared__ float shared[kThreads / 32];
  const int64_t n = blockIdx.x, row = n * V;
  float max = -INFINITY;
  for (int64_t v = threadIdx.x; v < V; v += blockDim.x) max = fmaxf(max, load(logits, row + v));
  max = block_max(max, shared);
  float sum = 0;
  for (int64_t v = threadIdx.x; v < V; v += blockDim.x) sum += expf(load(logits, row + v) - max);
  sum = block_sum(sum, shared);
  if (threadIdx.x == 0) {
    const float row_lse = max + logf(sum);
    lse[n] = row_lse;
    const float w = weights[n];
    const int64_t target = targets[n];
    const bool bad = target < 0 || target >= V;  // the host checks targets (ops.h): NaN here
    loss[n] = w == 0.0f
                  ? 0.0f
                  : (bad ? __int_as_float(0x7fc00000) : w * (row_lse - load(logits, row + target)));
  }
}

__global__ void cross_entropy_backward_kernel(DeviceFloats d_logits, ConstDeviceFloats logits,
                                              const float* lse, const int32_t* targets,
                                              const float* weights, float d_loss, int64_t N,
                                              int64_t V) {
  MAXCTX_GRID_STRIDE(k, N * V) {
    const int64_t n = k / V, v = k % V;
    const float w = weights[n];
    if (w == 0.0f) {
      store(d_logits, k, 0.0f);
      continue;
    }
    const float scale = d_loss * w;
    const int64_t target = targets[n];
    float d = scale * expf(load(logits, k) - lse[n]);
    if (target < 0 || target >= V) d = __int_as_float(0x7fc00000);
    if (v == target) d -= scale;
    store(d_logits, k, d);
  }
}

}  // namespace

void cross_entropy_forward(float* loss, float* lse, ConstDeviceFloats logits,
                           const int32_t* targets, const float* weights, int64_t N, int64_t V) {
  if (N == 0) return;
  cross_entropy_forward_kernel<<<row_grid(N), kThreads>>>(loss, lse, logits, targets, weights, V);
  MAXCTX_CUDA_LAUNCHED("cross_entropy_forward");
}

void cross_entropy_backward(DeviceFloats d_logits, ConstDeviceFloats logits, const float* lse,
                            const int32_t* targets, const float* weights, float d_loss, int64_t N,
                            int64_t V) {
  if (N == 0) return;
  cross_entropy_backward_kernel<<<grid_for(N * V), kThreads>>>(d_logits, logits, lse, targets,
                                                               weights, d_loss, N, V);
  MAXCTX_CUDA_LAUNCHED("cross_entropy_backward");
}

}  // namespace maxctx::kernels::cuda

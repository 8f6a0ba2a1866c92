// The arg max readouts (kernel_ops.inc): one block per row finds the first index of the row's
// largest value, as core/arg_max.h does on the host; the results stay in device memory.
#include "maxctx/kernels/cuda/cuda_check.h"
#include "maxctx/kernels/cuda/device_float.cuh"
#include "maxctx/kernels/cuda/ops.h"

namespace maxctx::kernels::cuda {
namespace {

// Whether (value a, index i) comes before (b, j) in the arg max's order: larger first, then the
// smaller index.
__device__ __forceinline__ bool precedes(float a, int64_t i, float b, int64_t j) {
  return a > b || (a == b && i < j);
}

// The first arg max of row blockIdx.x, known to thread 0.
__device__ int64_t row_arg_max(ConstDeviceFloats logits, int64_t V) {
  __shared__ float best_value[kThreads];
  __shared__ int64_t best_index[kThreads];
  const int64_t row = static_cast<int64_t>(blockIdx.x) * V;
  float value = -INFINITY;
  int64_t index = V;  // after every real index: any value found replaces it
  for (int64_t v = threadIdx.x; v < V; v += blockDim.x) {
    const float x = load(logits, row + v);
    if (index == V || precedes(x, v, value, index)) {
      value = x;
      index = v;
    }
  }
  best_value[threadIdx.x] = value;
  best_index[threadIdx.x] = index;
  __syncthreads();
  for (int stride = blockDim.x / 2; stride > 0; stride /= 2) {
    if (threadIdx.x < stride) {
      const int other = threadIdx.x + stride;
      if (best_index[other] < V && (best_index[threadIdx.x] == V ||
                                    precedes(best_value[other], best_index[other],
                                             best_value[threadIdx.x], best_index[threadIdx.x]))) {
        best_value[threadIdx.x] = best_value[other];
        best_index[threadIdx.x] = best_index[other];
      }
    }
    __syncthreads();
  }
  return best_index[0];
}

__global__ void arg_max_rows_kernel(int32_t* ids, ConstDeviceFloats logits, int64_t V) {
  const int64_t best = row_arg_max(logits, V);
  if (threadIdx.x == 0) ids[blockIdx.x] = static_cast<int32_t>(best);
}

// Each hit adds 1.0 to *out: exact in a double, so the order of the atomics does not matter.
__global__ void count_hits_kernel(double* out, ConstDeviceFloats logits, const int32_t* targets,
                                  const float* weights, int64_t V) {
  if (weights[blockIdx.x] == 0.0f) return;  // the whole block leaves together
  const int64_t best = row_arg_max(logits, V);
  if (threadIdx.x == 0 && best == targets[blockIdx.x]) atomicAdd(out, 1.0);
}

__global__ void zero_kernel(double* out) { *out = 0.0; }

}  // namespace

void count_arg_max_hits(double* out, ConstDeviceFloats logits, const int32_t* targets,
                        const float* weights, int64_t N, int64_t V) {
  zero_kernel<<<1, 1>>>(out);
  MAXCTX_CUDA_LAUNCHED("count_arg_max_hits zero");
  if (N == 0) return;
  count_hits_kernel<<<row_grid(N), kThreads>>>(out, logits, targets, weights, V);
  MAXCTX_CUDA_LAUNCHED("count_arg_max_hits");
}

void arg_max_rows(int32_t* ids, ConstDeviceFloats logits, int64_t N, int64_t V) {
  if (N == 0) return;
  arg_max_rows_kernel<<<row_grid(N), kThreads>>>(ids, logits, V);
  MAXCTX_CUDA_LAUNCHED("arg_max_rows");
}

}  // namespace maxctx::kernels::cuda

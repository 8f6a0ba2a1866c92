// Token embedding (kernels/ref/embedding.h); ids are checked by the host before upload (ops.h).
// Backward is deterministic without float atomics: the rows are sorted by token id with cub's
// stable radix sort (rows of one token keep their order), and one block per token sums that
// token's rows into its table row in row order, the reference's order of additions.
#include <cub/device/device_radix_sort.cuh>

#include "maxctx/kernels/cuda/allocator.h"
#include "maxctx/kernels/cuda/cuda_check.h"
#include "maxctx/kernels/cuda/device_float.cuh"
#include "maxctx/kernels/cuda/ops.h"

namespace maxctx::kernels::cuda {
namespace {

// An id outside [0, V) (the host checks ids before their upload, ops.h) gives a NaN row.
__global__ void embedding_forward_kernel(DeviceFloats out, const int32_t* tokens,
                                         ConstDeviceFloats table, int64_t N, int64_t D, int64_t V) {
  MAXCTX_GRID_STRIDE(k, N * D) {
    const int64_t n = k / D, j = k % D;
    const int64_t token = tokens[n];
    store(out, k,
          token >= 0 && token < V ? load(table, token * D + j) : __int_as_float(0x7fc00000));
  }
}

__global__ void iota_kernel(int32_t* values, int64_t n) {
  MAXCTX_GRID_STRIDE(i, n) { values[i] = static_cast<int32_t>(i); }
}

// Block b handles sorted position b when it starts a run of equal token ids.
__global__ void embedding_backward_kernel(float* d_table, ConstDeviceFloats d_out,
                                          const int32_t* sorted_tokens, const int32_t* sorted_rows,
                                          int64_t N, int64_t D, int64_t V) {
  const int64_t start = blockIdx.x;
  const int32_t token = sorted_tokens[start];
  if (start > 0 && sorted_tokens[start - 1] == token) return;
  if (token < 0 || token >= V) return;  // a bad id: its rows are NaN forward, skipped here
  for (int64_t j = threadIdx.x; j < D; j += blockDim.x) {
    float acc = d_table[static_cast<int64_t>(token) * D + j];
    for (int64_t s = start; s < N && sorted_tokens[s] == token; ++s) {
      acc += load(d_out, static_cast<int64_t>(sorted_rows[s]) * D + j);
    }
    d_table[static_cast<int64_t>(token) * D + j] = acc;
  }
}

int bits_for(int64_t bound) {
  int bits = 1;
  while (bits < 32 && (int64_t{1} << bits) < bound) ++bits;
  return bits;
}

}  // namespace

void embedding_forward(DeviceFloats out, const int32_t* tokens, ConstDeviceFloats table, int64_t N,
                       int64_t D, int64_t V) {
  if (N * D == 0) return;
  embedding_forward_kernel<<<grid_for(N * D), kThreads>>>(out, tokens, table, N, D, V);
  MAXCTX_CUDA_LAUNCHED("embedding_forward");
}

void embedding_backward(float* d_table, ConstDeviceFloats d_out, const int32_t* tokens, int64_t N,
                        int64_t D, int64_t V) {
  if (N * D == 0) return;
  const int items = static_cast<int>(row_grid(N));
  auto* sorted_keys = static_cast<int32_t*>(scratch(Scratch::kSortKeys, N * sizeof(int32_t)));
  auto* rows = static_cast<int32_t*>(scratch(Scratch::kSortValues, 2 * N * sizeof(int32_t)));
  int32_t* sorted_rows = rows + N;
  iota_kernel<<<grid_for(N), kThreads>>>(rows, N);
  MAXCTX_CUDA_LAUNCHED("iota");
  size_t temp_bytes = 0;
  MAXCTX_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(nullptr, temp_bytes, tokens, sorted_keys, rows,
                                                    sorted_rows, items, 0, bits_for(V)));
  void* temp = scratch(Scratch::kSortTemp, temp_bytes);
  MAXCTX_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(temp, temp_bytes, tokens, sorted_keys, rows,
                                                    sorted_rows, items, 0, bits_for(V)));
  embedding_backward_kernel<<<row_grid(N), kThreads>>>(d_table, d_out, sorted_keys, sorted_rows, N,
                                                       D, V);
  MAXCTX_CUDA_LAUNCHED("embedding_backward");
}

}  // namespace maxctx::kernels::cuda

// Token embedding (kernels/ref/embedding.h) and the id range check shared with cross-entropy.
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

__global__ void first_bad_id_kernel(const int32_t* ids, const float* weights, int64_t n,
                                    int64_t bound, unsigned long long* first_bad) {
  MAXCTX_GRID_STRIDE(i, n) {
    if (weights != nullptr && weights[i] == 0.0f) continue;
    if (ids[i] < 0 || ids[i] >= bound) atomicMin(first_bad, static_cast<unsigned long long>(i));
  }
}

__global__ void embedding_forward_kernel(DeviceFloats out, const int32_t* tokens,
                                         ConstDeviceFloats table, int64_t N, int64_t D) {
  MAXCTX_GRID_STRIDE(k, N * D) {
    const int64_t n = k / D, j = k % D;
    store(out, k, load(table, static_cast<int64_t>(tokens[n]) * D + j));
  }
}

__global__ void iota_kernel(int32_t* values, int64_t n) {
  MAXCTX_GRID_STRIDE(i, n) { values[i] = static_cast<int32_t>(i); }
}

// Block b handles sorted position b when it starts a run of equal token ids.
__global__ void embedding_backward_kernel(float* d_table, ConstDeviceFloats d_out,
                                          const int32_t* sorted_tokens, const int32_t* sorted_rows,
                                          int64_t N, int64_t D) {
  const int64_t start = blockIdx.x;
  const int32_t token = sorted_tokens[start];
  if (start > 0 && sorted_tokens[start - 1] == token) return;
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

BadId first_bad_id(const int32_t* ids, const float* weights, int64_t n, int64_t bound) {
  BadId bad;
  if (n == 0) return bad;
  auto* first_bad = static_cast<unsigned long long*>(scratch(Scratch::kSmall, 8));
  MAXCTX_CUDA_CHECK(cudaMemset(first_bad, 0xff, 8));
  first_bad_id_kernel<<<grid_for(n), kThreads>>>(ids, weights, n, bound, first_bad);
  MAXCTX_CUDA_LAUNCHED("first_bad_id");
  unsigned long long row = 0;
  MAXCTX_CUDA_CHECK(cudaMemcpy(&row, first_bad, 8, cudaMemcpyDeviceToHost));
  if (row == ~0ull) return bad;
  bad.found = true;
  bad.row = static_cast<int64_t>(row);
  MAXCTX_CUDA_CHECK(cudaMemcpy(&bad.id, ids + row, sizeof bad.id, cudaMemcpyDeviceToHost));
  if (weights != nullptr) {
    MAXCTX_CUDA_CHECK(
        cudaMemcpy(&bad.weight, weights + row, sizeof bad.weight, cudaMemcpyDeviceToHost));
  }
  return bad;
}

void embedding_forward(DeviceFloats out, const int32_t* tokens, ConstDeviceFloats table, int64_t N,
                       int64_t D, int64_t V) {
  if (N * D == 0) return;
  embedding_forward_kernel<<<grid_for(N * D), kThreads>>>(out, tokens, table, N, D);
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
                                                       D);
  MAXCTX_CUDA_LAUNCHED("embedding_backward");
}

}  // namespace maxctx::kernels::cuda

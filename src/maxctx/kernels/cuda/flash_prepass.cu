// The small kernels around the CUDA flash attention: per-block position/segment ranges (what
// tiles are classified from), delta = rowsum(dO∘O) for the backward, and stream-ordered scratch.
#include "maxctx/kernels/cuda/allocator.h"
#include "maxctx/kernels/cuda/cuda_check.h"
#include "maxctx/kernels/cuda/flash_common.cuh"

namespace maxctx::kernels::cuda::flash {
namespace {

// One thread per block of rows.
__global__ void block_bounds_kernel(BlockBounds* bounds, const int32_t* pos, const int32_t* seg,
                                    int batch, int rows, int block, int n_blocks) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= batch * n_blocks) return;
  const int b = i / n_blocks, blk = i % n_blocks;
  const int64_t begin = static_cast<int64_t>(b) * rows + static_cast<int64_t>(blk) * block;
  const int64_t end = static_cast<int64_t>(b) * rows + min(rows, (blk + 1) * block);
  BlockBounds r = bounds_of_row(pos[begin], seg[begin]);
  for (int64_t t = begin + 1; t < end; ++t) r = bounds_add_row(r, pos[t], seg[t]);
  bounds[i] = r;
}

// One warp per query row (B·Sq·Hq rows of out's layout), lanes over d, then a fixed shuffle tree:
// the same bits every run. d_out is rounded as the products use it (round_operand<In>: to bf16
// when q, k, v are bf16), as the cpu and the device reference do: delta = Σ dO·O must be the
// rowsum of the dO the backward's products see, or dS = P·(dO·vᵀ − delta) does not cancel.
template <typename In, typename DOut, typename Out>
__global__ void row_delta_kernel(float* delta, const DOut* d_out, const Out* out, int batch,
                                 int seq_q, int heads_q, int dim) {
  const int64_t row = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
  const int lane = threadIdx.x % 32;
  if (row >= static_cast<int64_t>(batch) * seq_q * heads_q) return;  // whole warps leave
  float sum = 0.0f;
  for (int d = lane; d < dim; d += 32) {
    sum =
        fmaf(round_operand<In>(to_float(d_out[row * dim + d])), to_float(out[row * dim + d]), sum);
  }
  for (int offset = 16; offset > 0; offset /= 2) sum += __shfl_xor_sync(0xffffffffu, sum, offset);
  if (lane != 0) return;
  const int64_t h = row % heads_q, t = row / heads_q;  // t = b·Sq + token
  delta[(t / seq_q * heads_q + h) * seq_q + t % seq_q] = sum;
}

}  // namespace

void launch_block_bounds(BlockBounds* bounds, const int32_t* pos, const int32_t* seg, int batch,
                         int rows, int block, void* stream) {
  const int n_blocks = (rows + block - 1) / block;
  const int count = batch * n_blocks;
  if (count == 0) return;
  constexpr int kThreads = 128;
  block_bounds_kernel<<<(count + kThreads - 1) / kThreads, kThreads, 0,
                        static_cast<cudaStream_t>(stream)>>>(bounds, pos, seg, batch, rows, block,
                                                             n_blocks);
  MAXCTX_CUDA_LAUNCHED("flash attention block ranges");
}

void launch_row_delta(float* delta, const void* d_out, Elem d_out_type, const void* out,
                      Elem out_type, Elem in_type, int batch, int seq_q, int heads_q, int dim,
                      void* stream) {
  const int64_t rows = static_cast<int64_t>(batch) * seq_q * heads_q;
  if (rows == 0) return;
  constexpr int kThreads = 256;  // 8 rows per block
  const auto blocks = static_cast<unsigned>((rows * 32 + kThreads - 1) / kThreads);
  with_elem(in_type, [&](auto in_elem) {
    using In = decltype(in_elem);
    with_elem(d_out_type, [&](auto d_out_elem) {
      using DOut = decltype(d_out_elem);
      with_elem(out_type, [&](auto out_elem) {
        using Out = decltype(out_elem);
        row_delta_kernel<In, DOut, Out><<<blocks, kThreads, 0, static_cast<cudaStream_t>(stream)>>>(
            delta, static_cast<const DOut*>(d_out), static_cast<const Out*>(out), batch, seq_q,
            heads_q, dim);
        MAXCTX_CUDA_LAUNCHED("flash attention backward delta");
      });
    });
  });
}

void* scratch_alloc(size_t bytes, void* stream) {
  void* data = nullptr;
  MAXCTX_CUDA_CHECK(
      cudaMallocAsync(&data, bytes > 0 ? bytes : 1, static_cast<cudaStream_t>(stream)));
  count_outside_memory(static_cast<int64_t>(bytes));
  return data;
}

void scratch_free(void* data, size_t bytes, void* stream) {
  // Called from destructors: an error here is left for the next checked call to report.
  if (data == nullptr) return;
  cudaFreeAsync(data, static_cast<cudaStream_t>(stream));
  count_outside_memory(-static_cast<int64_t>(bytes));
}

void copy_bounds_to_host(BlockBounds* host, const BlockBounds* device, size_t count, void* stream) {
  if (count == 0) return;
  const auto s = static_cast<cudaStream_t>(stream);
  MAXCTX_CUDA_CHECK(
      cudaMemcpyAsync(host, device, count * sizeof(BlockBounds), cudaMemcpyDeviceToHost, s));
  MAXCTX_CUDA_CHECK(cudaStreamSynchronize(s));
}

}  // namespace maxctx::kernels::cuda::flash

// int8 quantization and the int8 matmul on the device (int8.h gives the layouts).
#include <vector>

#include "maxctx/kernels/cuda/allocator.h"
#include "maxctx/kernels/cuda/cuda_check.h"
#include "maxctx/kernels/cuda/device_float.cuh"
#include "maxctx/kernels/cuda/int8.h"

namespace maxctx::kernels::cuda {
namespace {

size_t align_up(size_t bytes) { return (bytes + 255) / 256 * 256; }
size_t codes_bytes(int64_t rows, int64_t quads) { return align_up(rows * quads * 4); }

// One block per row: the reference's rule (max|x|, levels / max, rint, clamp), codes written
// with a row stride of `stride` (≥ cols) whose padding is 0. IEEE division and rintf (round half
// to even) give the reference's bits.
__global__ void quantize_rows_kernel(int8_t* codes, float* scale, ConstDeviceFloats x, int64_t cols,
                                     int64_t stride, float levels) {
  __shared__ float shared[kThreads / 32];
  const int64_t r = blockIdx.x;
  float max_abs = 0.0f;
  for (int64_t i = threadIdx.x; i < cols; i += blockDim.x) {
    max_abs = fmaxf(max_abs, fabsf(load(x, r * cols + i)));
  }
  max_abs = block_max(max_abs, shared);
  const float inv = max_abs == 0.0f ? 0.0f : levels / max_abs;
  for (int64_t i = threadIdx.x; i < stride; i += blockDim.x) {
    float code = 0.0f;
    if (i < cols && max_abs != 0.0f) {
      code = fminf(fmaxf(rintf(load(x, r * cols + i) * inv), -127.0f), 127.0f);
    }
    codes[r * stride + i] = static_cast<int8_t>(code);
  }
  if (threadIdx.x == 0) scale[r] = max_abs == 0.0f ? 0.0f : max_abs / levels;
}

__global__ void pad_codes_kernel(int8_t* padded, const int8_t* codes, int64_t rows, int64_t cols,
                                 int64_t stride) {
  MAXCTX_GRID_STRIDE(k, rows * stride) {
    const int64_t r = k / stride, i = k % stride;
    padded[k] = i < cols ? codes[r * cols + i] : int8_t{0};
  }
}

__global__ void dequantize_kernel(DeviceFloats x, const int8_t* codes, const float* scale,
                                  int64_t rows, int64_t cols) {
  MAXCTX_GRID_STRIDE(k, rows * cols) {
    store(x, k, static_cast<float>(codes[k]) * scale[k / cols]);
  }
}

// One thread per output (n, o): Σ over quads of dp4a (four int8 products into int32, exact).
__global__ void int8_matmul_kernel(DeviceFloats out, const int8_t* x_codes, const float* x_scale,
                                   const int8_t* w_codes, const float* w_scale, int64_t N,
                                   int64_t out_dim, int64_t quads) {
  MAXCTX_GRID_STRIDE(k, N * out_dim) {
    const int64_t n = k / out_dim, o = k % out_dim;
    const int* x = reinterpret_cast<const int*>(x_codes + n * quads * 4);
    const int* w = reinterpret_cast<const int*>(w_codes + o * quads * 4);
    int sum = 0;
    for (int64_t q = 0; q < quads; ++q) sum = __dp4a(x[q], w[q], sum);
    store(out, k, static_cast<float>(sum) * (x_scale[n] * w_scale[o]));
  }
}

void launch_quantize(int8_t* codes, float* scale, ConstDeviceFloats x, int64_t rows, int64_t cols,
                     int64_t stride, float levels) {
  if (rows == 0) return;
  quantize_rows_kernel<<<row_grid(rows), kThreads>>>(codes, scale, x, cols, stride, levels);
  MAXCTX_CUDA_LAUNCHED("quantize_rows_int8");
}

// The packed weight's shell: dims, device memory, and the host copies of scale and row_sum.
Int8Weights weights_shell(int64_t out_dim, int64_t in_dim) {
  Int8Weights w;
  w.out_dim = out_dim;
  w.in_dim = in_dim;
  w.quads = (in_dim + 3) / 4;
  w.blocks = (out_dim + kInt8BlockRows - 1) / kInt8BlockRows;
  w.packed = AlignedBuffer(codes_bytes(out_dim, w.quads) + align_up(out_dim * 4), cuda_allocator());
  return w;
}

void fill_host_copies(Int8Weights& w) {
  const size_t stride = static_cast<size_t>(w.quads * 4);
  std::vector<int8_t> codes(static_cast<size_t>(w.out_dim) * stride);
  w.scale.resize(static_cast<size_t>(w.out_dim));
  w.row_sum.assign(static_cast<size_t>(w.out_dim), 0);
  if (w.out_dim == 0) return;
  MAXCTX_CUDA_CHECK(
      cudaMemcpy(codes.data(), w.packed.data(), codes.size(), cudaMemcpyDeviceToHost));
  MAXCTX_CUDA_CHECK(cudaMemcpy(w.scale.data(), w.packed.data() + codes_bytes(w.out_dim, w.quads),
                               w.scale.size() * 4, cudaMemcpyDeviceToHost));
  for (size_t o = 0; o < w.row_sum.size(); ++o) {
    for (size_t i = 0; i < stride; ++i) w.row_sum[o] += codes[o * stride + i];
  }
}

}  // namespace

Int8Weights int8_pack_weights(ConstDeviceFloats weight, int64_t out_dim, int64_t in_dim) {
  Int8Weights w = weights_shell(out_dim, in_dim);
  auto* codes = reinterpret_cast<int8_t*>(w.packed.data());
  auto* scale = reinterpret_cast<float*>(w.packed.data() + codes_bytes(out_dim, w.quads));
  launch_quantize(codes, scale, weight, out_dim, in_dim, w.quads * 4, kInt8Levels);
  fill_host_copies(w);
  return w;
}

Int8Weights int8_pack_codes(const int8_t* codes, const float* scale, int64_t out_dim,
                            int64_t in_dim) {
  Int8Weights w = weights_shell(out_dim, in_dim);
  auto* padded = reinterpret_cast<int8_t*>(w.packed.data());
  if (out_dim * w.quads > 0) {
    pad_codes_kernel<<<grid_for(out_dim * w.quads * 4), kThreads>>>(padded, codes, out_dim, in_dim,
                                                                    w.quads * 4);
    MAXCTX_CUDA_LAUNCHED("pad_codes");
  }
  if (out_dim > 0) {
    MAXCTX_CUDA_CHECK(cudaMemcpy(w.packed.data() + codes_bytes(out_dim, w.quads), scale,
                                 out_dim * 4, cudaMemcpyDeviceToDevice));
  }
  fill_host_copies(w);
  return w;
}

void int8_quantize_rows(Int8Rows& rows, ConstDeviceFloats in, int64_t N, int64_t in_dim) {
  const int64_t quads = (in_dim + 3) / 4;
  const size_t bytes = codes_bytes(N, quads) + align_up(N * 4);
  if (rows.device.size() < bytes || rows.device.device() != Device::kCuda) {
    rows.device = AlignedBuffer(bytes, cuda_allocator());
  }
  rows.rows = N;
  rows.quads = quads;
  rows.codes.clear();
  rows.scale.clear();
  auto* codes = reinterpret_cast<int8_t*>(rows.device.data());
  auto* scale = reinterpret_cast<float*>(rows.device.data() + codes_bytes(N, quads));
  launch_quantize(codes, scale, in, N, in_dim, quads * 4, kInt8Levels);
}

void int8_matmul_forward(DeviceFloats out, const Int8Rows& rows, const Int8Weights& weight) {
  const int64_t N = rows.rows;
  if (N * weight.out_dim == 0) return;
  const auto* x_codes = reinterpret_cast<const int8_t*>(rows.device.data());
  const auto* x_scale =
      reinterpret_cast<const float*>(rows.device.data() + codes_bytes(N, rows.quads));
  const auto* w_codes = reinterpret_cast<const int8_t*>(weight.packed.data());
  const auto* w_scale = reinterpret_cast<const float*>(weight.packed.data() +
                                                       codes_bytes(weight.out_dim, weight.quads));
  int8_matmul_kernel<<<grid_for(N * weight.out_dim), kThreads>>>(
      out, x_codes, x_scale, w_codes, w_scale, N, weight.out_dim, weight.quads);
  MAXCTX_CUDA_LAUNCHED("int8_matmul_forward");
}

void quantize_rows_int8(int8_t* codes, float* scale, ConstDeviceFloats x, int64_t rows,
                        int64_t cols, float levels) {
  launch_quantize(codes, scale, x, rows, cols, cols, levels);
}

void dequantize_rows_int8(DeviceFloats x, const int8_t* codes, const float* scale, int64_t rows,
                          int64_t cols) {
  if (rows * cols == 0) return;
  dequantize_kernel<<<grid_for(rows * cols), kThreads>>>(x, codes, scale, rows, cols);
  MAXCTX_CUDA_LAUNCHED("dequantize_rows_int8");
}

}  // namespace maxctx::kernels::cuda

// Device-side reading and writing of DeviceFloats, and the launch helpers every kernel file uses.
// A bf16 element widens exactly; a store rounds the fp32 value once to nearest even with the
// bits of core/dtype.h's float_to_bf16 (a NaN stays a quiet NaN with its sign), so a tensor
// rounded here equals the one the cpu backend rounds.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "maxctx/kernels/cuda/device_float.h"
#include "maxctx/kernels/cuda/errors.h"

namespace maxctx::kernels::cuda {

__device__ __forceinline__ float bf16_bits_to_float(uint16_t bits) {
  return __uint_as_float(static_cast<uint32_t>(bits) << 16);
}

__device__ __forceinline__ uint16_t float_to_bf16_bits(float value) {
  const uint32_t bits = __float_as_uint(value);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((bits >> 16) | 0x0040u);
  const uint32_t rounding = 0x7fffu + ((bits >> 16) & 1u);  // round half to even
  return static_cast<uint16_t>((bits + rounding) >> 16);
}

// The value rounded to bf16 and widened back: what a bf16 product operand holds.
__device__ __forceinline__ float round_to_bf16(float value) {
  return bf16_bits_to_float(float_to_bf16_bits(value));
}

__device__ __forceinline__ float load(ConstDeviceFloats x, int64_t i) {
  if (x.bf16) return bf16_bits_to_float(static_cast<const uint16_t*>(x.data)[i]);
  return static_cast<const float*>(x.data)[i];
}

__device__ __forceinline__ void store(DeviceFloats x, int64_t i, float value) {
  if (x.bf16) {
    static_cast<uint16_t*>(x.data)[i] = float_to_bf16_bits(value);
  } else {
    static_cast<float*>(x.data)[i] = value;
  }
}

// Grid-stride loops: a fixed grid whatever n is (elementwise kernels).
inline constexpr int kThreads = 256;
inline unsigned grid_for(int64_t n) {
  const int64_t blocks = (n + kThreads - 1) / kThreads;
  return static_cast<unsigned>(blocks < 1 ? 1 : (blocks > 65535 ? 65535 : blocks));
}
// One block per row (row kernels): the row count must fit a grid's x dimension.
inline unsigned row_grid(int64_t rows) {
  if (rows > 0x7fffffff) cuda_error("cuda: more rows than one grid launches (2^31 - 1)");
  return static_cast<unsigned>(rows);
}
#define MAXCTX_GRID_STRIDE(i, n)                                                         \
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < (n); \
       i += static_cast<int64_t>(blockDim.x) * gridDim.x)

// The sum over a block of one value per thread, in a fixed tree order (deterministic): every
// thread gets the total. `shared` holds blockDim.x / 32 values; blockDim.x a multiple of 32.
template <typename T>
__device__ T block_sum(T value, T* shared) {
  for (int offset = 16; offset > 0; offset /= 2)
    value += __shfl_xor_sync(0xffffffffu, value, offset);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, warps = blockDim.x / 32;
  __syncthreads();  // `shared` may still be read by a previous call
  if (lane == 0) shared[warp] = value;
  __syncthreads();
  value = lane < warps ? shared[lane] : T(0);
  for (int offset = 16; offset > 0; offset /= 2)
    value += __shfl_xor_sync(0xffffffffu, value, offset);
  return value;
}

template <typename T>
__device__ T block_max(T value, T* shared) {
  for (int offset = 16; offset > 0; offset /= 2) {
    value = fmaxf(value, __shfl_xor_sync(0xffffffffu, value, offset));
  }
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, warps = blockDim.x / 32;
  __syncthreads();
  if (lane == 0) shared[warp] = value;
  __syncthreads();
  value = lane < warps ? shared[lane] : -INFINITY;
  for (int offset = 16; offset > 0; offset /= 2) {
    value = fmaxf(value, __shfl_xor_sync(0xffffffffu, value, offset));
  }
  return value;
}

__device__ __forceinline__ float warp_sum(float value) {
  for (int offset = 16; offset > 0; offset /= 2)
    value += __shfl_xor_sync(0xffffffffu, value, offset);
  return value;
}

}  // namespace maxctx::kernels::cuda

// Internal to the CUDA flash attention's .cu files: how a tile's packed rows map to (query
// head, token), element conversions, and the dtype dispatch of the launchers.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "maxctx/kernels/cuda/cuda_check.h"
#include "maxctx/kernels/cuda/flash_launch.h"
#include "maxctx/kernels/mask.h"

namespace maxctx::kernels::cuda::flash {

// Where packed row r of tile (qb, chunk c) of kv head hk lives.
struct TileRow {
  int head, token;
  bool valid;  // a real query row (not past Sq, not past the group's last head)
};

__device__ inline TileRow tile_row(const Shape& g, int qb, int c, int hk, int r) {
  const int jj = r / g.block_t;
  TileRow row;
  row.head = hk * g.group + c * g.heads_per_tile + jj;
  row.token = qb * g.block_t + r % g.block_t;
  row.valid = jj < g.heads_in_chunk(c) && row.token < g.seq_q;
  return row;
}

__device__ inline float to_float(float x) { return x; }
__device__ inline float to_float(__nv_bfloat16 x) { return __bfloat162float(x); }

template <typename T>
__device__ inline T from_float(float x);
template <>
__device__ inline float from_float<float>(float x) {
  return x;
}
template <>
__device__ inline __nv_bfloat16 from_float<__nv_bfloat16>(float x) {
  return __float2bfloat16_rn(x);
}

// The operand rounding of kernels.h's bf16 rule: with bf16 inputs, values that feed a product
// (P, dS, d_out) are rounded to bf16 first; with f32 inputs nothing is rounded.
template <typename In>
__device__ inline float round_operand(float x) {
  return to_float(from_float<In>(x));
}

// Raises `kernel`'s dynamic shared-memory limit to `bytes`. The limit is an attribute of the
// kernel, not of a launch: a launcher calls this from a function-local static, once per kernel
// instantiation and process (one device per process), instead of a driver call on every launch.
template <typename Kernel>
bool allow_dynamic_shared_memory(Kernel kernel, size_t bytes) {
  MAXCTX_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                         static_cast<int>(bytes)));
  return true;
}

// f(float{}) or f(__nv_bfloat16{}).
template <typename F>
void with_elem(Elem e, F&& f) {
  if (e == Elem::kF32) {
    f(float{});
  } else {
    f(__nv_bfloat16{});
  }
}

}  // namespace maxctx::kernels::cuda::flash

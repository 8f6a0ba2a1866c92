// Internal to the CUDA flash attention: the seam between flash_attention.cpp (checks, dtypes,
// stats; compiled by the host compiler) and the .cu files (kernels and their launchers). Plain
// C++ without CUDA types and without fmt (nvcc 13 cannot compile fmt 9's consteval checks, so
// the .cu files include nothing that includes core/check.h): pointers are device memory, the
// stream is a cudaStream_t as void*, and a CUDA failure is thrown as maxctx::Error through the
// backend's cuda_check.h (errors.cpp formats it on the host compiler's side).
#pragma once

#include <cstddef>
#include <cstdint>

#include "maxctx/kernels/mask.h"

namespace maxctx::kernels::cuda::flash {

// The shapes of one call for one tiling. A tile holds heads_per_tile query heads of one kv group
// (chunk c of the group's heads) × block_t tokens, head-major: packed row r is head r / block_t,
// token r % block_t. The mask depends on tokens only, so one verdict serves all heads of a tile.
struct Shape {
  int batch, seq_q, seq_k, heads_q, heads_kv, dim, group;
  int heads_per_tile, block_t, n_chunks, n_qb, block_k, n_kb;
  float scale;
  int32_t window;

  MAXCTX_HOST_DEVICE int heads_in_chunk(int c) const {
    const int left = group - c * heads_per_tile;
    return left < heads_per_tile ? left : heads_per_tile;
  }
  MAXCTX_HOST_DEVICE int keys_in_kb(int kb) const {
    const int left = seq_k - kb * block_k;
    return left < block_k ? left : block_k;
  }
};

// Positions and segment ids (B, S) and the block ranges: q_bounds over blocks of block_t query
// tokens, k_bounds over blocks of block_k keys, [b * n_blocks + block].
struct Masks {
  const int32_t *q_pos, *q_seg, *k_pos, *k_seg;
  const BlockBounds *q_bounds, *k_bounds;
};

enum class Elem { kF32, kBF16 };

// Forward, bf16 q/k/v on mma.sync: tiles of 64 packed rows × 64 keys.
inline constexpr int kMmaTileRows = 64;
inline constexpr int kMmaBlockK = 64;
void launch_forward_mma(void* out, Elem out_type, float* lse, const void* q, const void* k,
                        const void* v, const Masks& m, const Shape& g, void* stream);

// Forward, f32 q/k/v on FFMA tiles of 32 packed rows × 32 keys.
inline constexpr int kFfmaTileRows = 32;
inline constexpr int kFfmaBlockK = 32;
void launch_forward_ffma(void* out, Elem out_type, float* lse, const float* q, const float* k,
                         const float* v, const Masks& m, const Shape& g, void* stream);

// Backward on FFMA tiles of 32 query tokens of one head × 32 keys (no head packing: the dk/dv
// kernel loops over the group's heads itself), f32 or bf16 q/k/v; delta from row_delta.
inline constexpr int kBackwardBlock = 32;
void launch_backward(float* dq, float* dk, float* dv, const void* d_out, Elem d_out_type,
                     const float* lse, const float* delta, const void* q, const void* k,
                     const void* v, Elem in_type, const Masks& m, const Shape& g, void* stream);

// ---- pre-passes and scratch (flash_prepass.cu)
// bounds[b * ceil(rows / block) + blk] of (batch, rows) positions/segments.
void launch_block_bounds(BlockBounds* bounds, const int32_t* pos, const int32_t* seg, int batch,
                         int rows, int block, void* stream);
// delta (B, Hq, Sq) = Σ_d d_out·out per query row, d_out rounded as an operand of in_type (the
// q, k, v dtype: bf16 rounds it, kernels.h's precision contract).
void launch_row_delta(float* delta, const void* d_out, Elem d_out_type, const void* out,
                      Elem out_type, Elem in_type, int batch, int seq_q, int heads_q, int dim,
                      void* stream);
// Stream-ordered temporaries, counted in the allocator's committed bytes while held.
void* scratch_alloc(size_t bytes, void* stream);  // never null
void scratch_free(void* data, size_t bytes, void* stream);
// Waits for the stream, then copies count bounds to the host.
void copy_bounds_to_host(BlockBounds* host, const BlockBounds* device, size_t count, void* stream);

}  // namespace maxctx::kernels::cuda::flash

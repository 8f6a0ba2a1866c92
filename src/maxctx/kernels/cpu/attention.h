// Position-masked attention on the CPU: flash-style tiles, online softmax, fp32.
//
// Same contract, layout and signatures as maxctx::kernels::ref (ref/attention.h, which also
// defines AttentionParams and AttentionStats); this is the fast form, tested against the
// reference on one table of cases. Scores never exist at full size: a tile of query rows
// (several query heads of one kv group × a block of tokens) meets a block of keys at a time.
// Tiles provably fully masked (from the min/max of positions and segment ids of the two blocks)
// are skipped, tiles provably fully visible skip the per-element mask, the rest apply it exactly.
// Results are deterministic for a given OpenMP thread count.
#pragma once

#include <cstdint>

#include "maxctx/core/dtype.h"
#include "maxctx/kernels/types.h"

namespace maxctx::kernels::cpu {

// Tile geometry, sized for a 1 MiB L2 per core at D = 128: a tile of kAttentionTileRows query
// rows and kAttentionBlockK keys keeps Q (128 KiB), the output accumulator (128 KiB), the
// scores (128 KiB) and the K and V blocks (64 KiB each) resident with room to spare, while 256
// rows × 128 keys are enough for the tile products to run near the FMA peak. Query heads of one
// kv group share a tile (the mask depends on tokens only), up to kAttentionTileRows /
// kAttentionMinBlockQ heads, so the token block is 256 (MHA), 128 (2 query heads per kv head)
// or 64 tokens (4 or more).
inline constexpr int64_t kAttentionTileRows = 256;
inline constexpr int64_t kAttentionMinBlockQ = 64;
inline constexpr int64_t kAttentionBlockK = 128;

// How the query rows of one kv group are cut into tiles.
struct AttentionTiling {
  int64_t heads_per_tile;  // query heads of one kv group in a tile
  int64_t block_q;         // query tokens in a tile
};
AttentionTiling attention_tiling(const AttentionParams& params);

void attention_forward(float* out, float* lse, const float* q, const float* k, const float* v,
                       const int32_t* q_pos, const int32_t* q_seg, const int32_t* k_pos,
                       const int32_t* k_seg, const AttentionParams& params,
                       AttentionStats* stats = nullptr);

void attention_backward(float* dq, float* dk, float* dv, const float* d_out, const float* out,
                        const float* lse, const float* q, const float* k, const float* v,
                        const int32_t* q_pos, const int32_t* q_seg, const int32_t* k_pos,
                        const int32_t* k_seg, const AttentionParams& params,
                        AttentionStats* stats = nullptr);

// The same with q, k, v in bf16 (attention_bf16.cpp; kernels.h's precision contract): bf16
// products with fp32 sums, softmax in fp32, P (and in backward dO and dS) rounded to bf16 for
// the products. Out is float or bf16 (rounded once); d_out and out in backward float or bf16;
// lse, dq, dk, dv f32. head_dim must be even. The bits never depend on the thread count, and are
// the same with or without AVX512_BF16 (attention_tiles.h).
template <typename Out>
void attention_forward_bf16(Out* out, float* lse, const bf16* q, const bf16* k, const bf16* v,
                            const int32_t* q_pos, const int32_t* q_seg, const int32_t* k_pos,
                            const int32_t* k_seg, const AttentionParams& params,
                            AttentionStats* stats = nullptr);

template <typename DOut, typename Out>
void attention_backward_bf16(float* dq, float* dk, float* dv, const DOut* d_out, const Out* out,
                             const float* lse, const bf16* q, const bf16* k, const bf16* v,
                             const int32_t* q_pos, const int32_t* q_seg, const int32_t* k_pos,
                             const int32_t* k_seg, const AttentionParams& params,
                             AttentionStats* stats = nullptr);

void attention_merge(float* out, float* lse, const float* out_a, const float* lse_a,
                     const float* out_b, const float* lse_b, int64_t batch, int64_t seq_q,
                     int64_t heads_q, int64_t head_dim);

}  // namespace maxctx::kernels::cpu

// Attention of one query token per batch row against a KV cache: the decode step's attention.
//
// The same contract as attention_forward (kernels/ref/attention.h) at p.seq_q == 1, and tested
// against it: q, out (B, 1, Hq, D); k, v (B, Sk, Hkv, D) in any row order, masked row by row
// through attention_visible (positions, segment ids, sliding window); lse (B, Hq) natural
// log-sum-exp; a query that sees no key gets out = 0 and lse = -inf.
//
// Why a separate kernel: decode is memory-bound, one pass over the cache per step. The blocked
// flash kernel is built for query tiles: at seq_q = 1 it pads the query to a tile and re-packs K
// per call. This one streams each K and V row once for the whole GQA group of query heads, the
// rows staying in L1 while the group's dot products and accumulations use them. On this machine
// (bench/kernels, decode_attention: B = 1, Hq = 8, Hkv = 2, D = 32, 4 per-layer 32K caches from
// DRAM) it reads about 24 GB/s against the general kernel's 6.5 (a plain sequential read of one
// core: about 33).
#pragma once

#include <cstdint>

#include "maxctx/core/dtype.h"
#include "maxctx/kernels/types.h"

namespace maxctx::kernels::cpu {

void single_query_attention(float* out, float* lse, const float* q, const float* k, const float* v,
                            const int32_t* q_pos, const int32_t* q_seg, const int32_t* k_pos,
                            const int32_t* k_seg, const AttentionParams& params);

// The same over a bf16 KV cache: k, v (B, Sk, Hkv, D) bf16. The block's visible rows of a kv head
// are widened (exactly) into an L1-sized scratch as the int8 rows are dequantized below, and
// the fp32 arithmetic runs on them: the bits of the fp32 kernel on the widened cache, from half
// the bytes.
void single_query_attention(float* out, float* lse, const float* q, const bf16* k, const bf16* v,
                            const int32_t* q_pos, const int32_t* q_seg, const int32_t* k_pos,
                            const int32_t* k_seg, const AttentionParams& params);

// The same over an int8 KV cache (quantize_kvcache): k, v (B, Sk, Hkv, D) int8 codes with one
// scale per cache row, k_scale, v_scale (B, Sk). Rows are dequantized as float(code) · scale, the
// bits of dequantize_rows_int8 (kernels/cpu/int8.h), one kv head and block at a time into an
// L1-sized scratch, so a decode step reads the int8 bytes once and never writes an fp32 copy of
// the cache.
void single_query_attention_int8(float* out, float* lse, const float* q, const int8_t* k,
                                 const float* k_scale, const int8_t* v, const float* v_scale,
                                 const int32_t* q_pos, const int32_t* q_seg, const int32_t* k_pos,
                                 const int32_t* k_seg, const AttentionParams& params);

// The Highway target single_query_attention runs on ("AVX3_DL", "AVX2", ...).
const char* single_query_attention_simd_target();

}  // namespace maxctx::kernels::cpu

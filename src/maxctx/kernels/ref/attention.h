// Position-masked attention: the op's contract and its reference (plain loops, the oracle).
//
// Layout is token-major, as the projections produce it (legend: B batch, Sq query rows, Sk key
// rows, Hq query heads, Hkv kv heads, D head_dim):
//   q, out (B, Sq, Hq, D)   k, v (B, Sk, Hkv, D)   lse (B, Hq, Sq)
//   q_pos, q_seg (B, Sq) int32   k_pos, k_seg (B, Sk) int32
// Row index is never position: positions and segment ids are explicit and may come in any order
// (context parallelism reorders tokens and gathers K/V chunks from other ranks). Query row i sees
// key row j iff attention_visible(...) below. Query head h reads kv head h / (Hq / Hkv); K/V are
// never copied per query head. A query row that sees no key gets out = 0 and lse = -inf.
//
// The parameter and statistics types live in kernels/types.h (production code includes that,
// never this file). maxctx::kernels::cpu declares the same functions (float only); both are
// tested against the same table of cases. The reference is templated so that finite differences can
// run in double.
#pragma once

#include <cstdint>

#include "maxctx/kernels/types.h"

namespace maxctx::kernels::ref {

// out = softmax(q·kᵀ·scale + mask)·v per query head; lse = natural log-sum-exp of the scaled,
// masked scores per query row (-inf when the row sees no key).
template <typename T>
void attention_forward(T* out, T* lse, const T* q, const T* k, const T* v, const int32_t* q_pos,
                       const int32_t* q_seg, const int32_t* k_pos, const int32_t* k_seg,
                       const AttentionParams& params, AttentionStats* stats = nullptr);

// Backward from the saved out and lse, ACCUMULATING (+=) into dq (B, Sq, Hq, D) and
// dk, dv (B, Sk, Hkv, D); callers zero them. With the global out/lse (attention over all keys)
// and k/v one chunk of the keys, it returns that chunk's share: the chunks' results sum to the
// full backward (ring attention).
template <typename T>
void attention_backward(T* dq, T* dk, T* dv, const T* d_out, const T* out, const T* lse, const T* q,
                        const T* k, const T* v, const int32_t* q_pos, const int32_t* q_seg,
                        const int32_t* k_pos, const int32_t* k_seg, const AttentionParams& params,
                        AttentionStats* stats = nullptr);

// Merges two partial results over disjoint key sets, out (B, Sq, Hq, D) and lse (B, Hq, Sq):
// lse = log(e^lse_a + e^lse_b), out = e^(lse_a - lse)·out_a + e^(lse_b - lse)·out_b. A side with
// lse = -inf contributes nothing; both -inf gives out = 0, lse = -inf. out/lse may alias
// out_a/lse_a (each element is read before it is written).
template <typename T>
void attention_merge(T* out, T* lse, const T* out_a, const T* lse_a, const T* out_b, const T* lse_b,
                     int64_t batch, int64_t seq_q, int64_t heads_q, int64_t head_dim);

}  // namespace maxctx::kernels::ref

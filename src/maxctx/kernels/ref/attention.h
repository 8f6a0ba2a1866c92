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
// maxctx::kernels::cpu declares the same functions (float only); both are tested against the
// same table of cases. The reference is templated so that finite differences can run in double.
#pragma once

#include <cstdint>

namespace maxctx::kernels {

struct AttentionParams {
  int64_t batch = 1;           // B
  int64_t seq_q = 0;           // Sq: query rows per batch element
  int64_t seq_k = 0;           // Sk: key/value rows per batch element (may be one chunk of them)
  int64_t heads_q = 0;         // Hq
  int64_t heads_kv = 0;        // Hkv; Hq % Hkv == 0 (MHA: Hkv == Hq, MQA: Hkv == 1)
  int64_t head_dim = 0;        // D
  double scale = 0.0;          // multiplies q·k; 0 selects the usual 1/sqrt(D)
  int32_t sliding_window = 0;  // > 0: key j is also masked when q_pos - k_pos >= sliding_window

  double softmax_scale() const;
  int64_t group_size() const { return heads_q / heads_kv; }  // query heads per kv head
};

// Work counted in (query block, key block) tiles per batch element and kv head. A tile is
// skipped when it is provably fully masked; the cpu kernel's tiles are its block sizes, the
// reference's tiles are single (query row, key row) pairs. Counts add up over calls.
struct AttentionStats {
  int64_t blocks_computed = 0;
  int64_t blocks_skipped = 0;
};

// Aborts (MAXCTX_CHECK) unless the dims are positive (Sq, Sk may be 0), Hq % Hkv == 0, the
// window is >= 0 and the scale is finite.
void check_attention_params(const AttentionParams& params);

// The mask, in one place. Differences are taken in 64 bits so extreme positions cannot wrap.
inline bool attention_visible(int32_t q_pos, int32_t q_seg, int32_t k_pos, int32_t k_seg,
                              int32_t sliding_window) {
  const int64_t distance = static_cast<int64_t>(q_pos) - k_pos;
  return q_seg == k_seg && distance >= 0 && (sliding_window <= 0 || distance < sliding_window);
}

}  // namespace maxctx::kernels

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

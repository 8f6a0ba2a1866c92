// Reference attention: one query row at a time, every key tested against the mask, no tiles,
// no threads. It is the oracle for the cpu kernel and for context-parallel attention, so it stays
// this plain: a two-pass softmax (max, then sum) over the visible keys of each row.
#include "maxctx/kernels/ref/attention.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "maxctx/core/check.h"

namespace maxctx::kernels::ref {
namespace {

template <typename T>
T dot(const T* a, const T* b, int64_t n) {
  T sum = 0;
  for (int64_t i = 0; i < n; ++i) sum += a[i] * b[i];
  return sum;
}

// Counts the (query row, key row) pairs of one batch element: the reference's 1×1 tiles.
void count_pairs(const int32_t* q_pos, const int32_t* q_seg, const int32_t* k_pos,
                 const int32_t* k_seg, const AttentionParams& p, AttentionStats* stats) {
  if (stats == nullptr) return;
  for (int64_t i = 0; i < p.seq_q; ++i) {
    for (int64_t j = 0; j < p.seq_k; ++j) {
      const bool seen = attention_visible(q_pos[i], q_seg[i], k_pos[j], k_seg[j], p.sliding_window);
      (seen ? stats->blocks_computed : stats->blocks_skipped) += p.heads_kv;
    }
  }
}

}  // namespace

template <typename T>
void attention_forward(T* out, T* lse, const T* q, const T* k, const T* v, const int32_t* q_pos,
                       const int32_t* q_seg, const int32_t* k_pos, const int32_t* k_seg,
                       const AttentionParams& p, AttentionStats* stats) {
  check_attention_params(p);
  const int64_t Sq = p.seq_q, Sk = p.seq_k, Hq = p.heads_q, Hkv = p.heads_kv, D = p.head_dim;
  const T scale = static_cast<T>(p.softmax_scale());
  const T neg_inf = -std::numeric_limits<T>::infinity();
  std::vector<T> score(static_cast<size_t>(Sk));  // (Sk) scaled scores of one query row
  for (int64_t b = 0; b < p.batch; ++b) {
    const int32_t* qp = q_pos + b * Sq;
    const int32_t* qs = q_seg + b * Sq;
    const int32_t* kp = k_pos + b * Sk;
    const int32_t* ks = k_seg + b * Sk;
    count_pairs(qp, qs, kp, ks, p, stats);
    for (int64_t h = 0; h < Hq; ++h) {
      const int64_t hk = h / p.group_size();
      for (int64_t i = 0; i < Sq; ++i) {
        const T* q_row = q + ((b * Sq + i) * Hq + h) * D;
        T* out_row = out + ((b * Sq + i) * Hq + h) * D;
        T max_score = neg_inf;
        for (int64_t j = 0; j < Sk; ++j) {
          if (!attention_visible(qp[i], qs[i], kp[j], ks[j], p.sliding_window)) {
            score[j] = neg_inf;
            continue;
          }
          score[j] = scale * dot(q_row, k + ((b * Sk + j) * Hkv + hk) * D, D);
          max_score = std::max(max_score, score[j]);
        }
        for (int64_t d = 0; d < D; ++d) out_row[d] = 0;
        T& row_lse = lse[(b * Hq + h) * Sq + i];
        if (max_score == neg_inf) {  // no visible key
          row_lse = neg_inf;
          continue;
        }
        T sum = 0;
        for (int64_t j = 0; j < Sk; ++j) {
          if (score[j] == neg_inf) continue;
          const T weight = std::exp(score[j] - max_score);
          sum += weight;
          const T* v_row = v + ((b * Sk + j) * Hkv + hk) * D;
          for (int64_t d = 0; d < D; ++d) out_row[d] += weight * v_row[d];
        }
        for (int64_t d = 0; d < D; ++d) out_row[d] /= sum;
        row_lse = max_score + std::log(sum);
      }
    }
  }
}

template <typename T>
void attention_backward(T* dq, T* dk, T* dv, const T* d_out, const T* out, const T* lse, const T* q,
                        const T* k, const T* v, const int32_t* q_pos, const int32_t* q_seg,
                        const int32_t* k_pos, const int32_t* k_seg, const AttentionParams& p,
                        AttentionStats* stats) {
  check_attention_params(p);
  const int64_t Sq = p.seq_q, Sk = p.seq_k, Hq = p.heads_q, Hkv = p.heads_kv, D = p.head_dim;
  const T scale = static_cast<T>(p.softmax_scale());
  for (int64_t b = 0; b < p.batch; ++b) {
    const int32_t* qp = q_pos + b * Sq;
    const int32_t* qs = q_seg + b * Sq;
    const int32_t* kp = k_pos + b * Sk;
    const int32_t* ks = k_seg + b * Sk;
    count_pairs(qp, qs, kp, ks, p, stats);
    for (int64_t h = 0; h < Hq; ++h) {
      const int64_t hk = h / p.group_size();
      for (int64_t i = 0; i < Sq; ++i) {
        const T row_lse = lse[(b * Hq + h) * Sq + i];
        if (std::isinf(row_lse) && row_lse < 0) continue;  // the row saw no key anywhere
        const int64_t row = (b * Sq + i) * Hq + h;
        const T* q_row = q + row * D;
        const T* d_out_row = d_out + row * D;
        T* dq_row = dq + row * D;
        // delta = Σ_j p_ij·(dO_i·v_j) = dO_i·out_i, from the saved (global) out.
        const T delta = dot(d_out_row, out + row * D, D);
        for (int64_t j = 0; j < Sk; ++j) {
          if (!attention_visible(qp[i], qs[i], kp[j], ks[j], p.sliding_window)) continue;
          const int64_t kv_row = (b * Sk + j) * Hkv + hk;
          const T* k_row = k + kv_row * D;
          const T* v_row = v + kv_row * D;
          const T prob = std::exp(scale * dot(q_row, k_row, D) - row_lse);
          const T d_score = prob * (dot(d_out_row, v_row, D) - delta);
          T* dk_row = dk + kv_row * D;
          T* dv_row = dv + kv_row * D;
          for (int64_t d = 0; d < D; ++d) {
            dq_row[d] += scale * d_score * k_row[d];
            dk_row[d] += scale * d_score * q_row[d];
            dv_row[d] += prob * d_out_row[d];
          }
        }
      }
    }
  }
}

template <typename T>
void attention_merge(T* out, T* lse, const T* out_a, const T* lse_a, const T* out_b, const T* lse_b,
                     int64_t batch, int64_t seq_q, int64_t heads_q, int64_t head_dim) {
  const T neg_inf = -std::numeric_limits<T>::infinity();
  for (int64_t b = 0; b < batch; ++b) {
    for (int64_t h = 0; h < heads_q; ++h) {
      for (int64_t i = 0; i < seq_q; ++i) {
        const int64_t l = (b * heads_q + h) * seq_q + i;
        const T la = lse_a[l], lb = lse_b[l];
        const T m = std::max(la, lb);
        // With m == -inf both sides are empty; the weights would be exp(nan).
        const T wa = m == neg_inf ? T(0) : std::exp(la - m);
        const T wb = m == neg_inf ? T(0) : std::exp(lb - m);
        const T sum = wa + wb;
        const int64_t row = ((b * seq_q + i) * heads_q + h) * head_dim;
        // A side with weight 0 is not read, so whatever it holds cannot leak in as NaN.
        for (int64_t d = 0; d < head_dim; ++d) {
          const T from_a = wa > 0 ? wa * out_a[row + d] : T(0);
          const T from_b = wb > 0 ? wb * out_b[row + d] : T(0);
          out[row + d] = m == neg_inf ? T(0) : (from_a + from_b) / sum;
        }
        lse[l] = m == neg_inf ? neg_inf : m + std::log(sum);
      }
    }
  }
}

#define MAXCTX_INSTANTIATE_ATTENTION(T)                                                         \
  template void attention_forward<T>(T*, T*, const T*, const T*, const T*, const int32_t*,      \
                                     const int32_t*, const int32_t*, const int32_t*,            \
                                     const AttentionParams&, AttentionStats*);                  \
  template void attention_backward<T>(                                                          \
      T*, T*, T*, const T*, const T*, const T*, const T*, const T*, const T*, const int32_t*,   \
      const int32_t*, const int32_t*, const int32_t*, const AttentionParams&, AttentionStats*); \
  template void attention_merge<T>(T*, T*, const T*, const T*, const T*, const T*, int64_t,     \
                                   int64_t, int64_t, int64_t);
MAXCTX_INSTANTIATE_ATTENTION(float)
MAXCTX_INSTANTIATE_ATTENTION(double)
#undef MAXCTX_INSTANTIATE_ATTENTION

}  // namespace maxctx::kernels::ref

// The plain device attention's kernels (attention_reference.h says what and why).
#include <cmath>

#include "maxctx/kernels/cuda/allocator.h"
#include "maxctx/kernels/cuda/cuda_check.h"
#include "maxctx/kernels/cuda/device_float.cuh"
#include "maxctx/kernels/cuda/ops.h"
#include "maxctx/kernels/decode_split.h"

namespace maxctx::kernels::cuda {
namespace {

constexpr int kWarpsPerBlock = 4;
constexpr int kPerLane = static_cast<int>(kMaxHeadDim / 32);

__device__ __forceinline__ float load_kv(const KvRows& kv, int64_t index, int64_t cache_row) {
  switch (kv.dtype) {
    case DType::kBF16:
      return bf16_bits_to_float(static_cast<const uint16_t*>(kv.data)[index]);
    case DType::kI8:
      return static_cast<float>(static_cast<const int8_t*>(kv.data)[index]) *
             kv.row_scale[cache_row];
    default:
      return static_cast<const float*>(kv.data)[index];
  }
}

using Dims = AttentionDims;
using Masks = AttentionMasks;

__device__ __forceinline__ bool visible(const Masks& m, const Dims& d, int64_t b, int64_t i,
                                        int64_t j) {
  const int32_t qp = m.q_pos[b * d.seq_q + i], kp = m.k_pos[b * d.seq_k + j];
  const int64_t distance = static_cast<int64_t>(qp) - kp;
  return m.q_seg[b * d.seq_q + i] == m.k_seg[b * d.seq_k + j] && distance >= 0 &&
         (d.window <= 0 || distance < d.window);
}

// Σ_d x[d]·kv[row, d] over the warp, x held per lane (x[t] is element lane + 32t).
__device__ __forceinline__ float dot_kv(const float (&x)[kPerLane], const KvRows& kv,
                                        int64_t kv_row, int64_t cache_row, int64_t D, int lane) {
  float sum = 0;
#pragma unroll
  for (int t = 0; t < kPerLane; ++t) {
    const int64_t d = lane + 32 * t;
    if (d < D) sum += x[t] * load_kv(kv, kv_row * D + d, cache_row);
  }
  return warp_sum(sum);
}

__device__ __forceinline__ void load_row(float (&x)[kPerLane], ConstDeviceFloats src, int64_t row,
                                         int64_t D, int lane, bool round) {
#pragma unroll
  for (int t = 0; t < kPerLane; ++t) {
    const int64_t d = lane + 32 * t;
    const float value = d < D ? load(src, row * D + d) : 0.0f;
    x[t] = round ? round_to_bf16(value) : value;
  }
}

// One warp per (b, h, i), rows numbered with i fastest, and key block blockIdx.y: keys
// [y · block_keys, min(Sk, (y + 1) · block_keys)). Block y writes its out and lse at y times
// their size past `out` and `lse` (one block, the whole cache: the result itself).
__global__ void forward_kernel(DeviceFloats out, float* lse, ConstDeviceFloats q, KvRows k,
                               KvRows v, Masks masks, Dims d, bool bf16_products,
                               int64_t block_keys) {
  const int lane = threadIdx.x % 32;
  const int64_t rows = d.batch * d.heads_q * d.seq_q;
  const int64_t r = blockIdx.x * static_cast<int64_t>(kWarpsPerBlock) + threadIdx.x / 32;
  if (r >= rows) return;
  const int64_t i = r % d.seq_q, h = (r / d.seq_q) % d.heads_q, b = r / (d.seq_q * d.heads_q);
  const int64_t hk = h / d.group;
  const int64_t q_row = (b * d.seq_q + i) * d.heads_q + h;
  const int64_t key_begin = blockIdx.y * block_keys;
  const int64_t key_end = min(d.seq_k, key_begin + block_keys);
  const int64_t out_row = blockIdx.y * rows + q_row, lse_row = blockIdx.y * rows + r;
  float qv[kPerLane];
  load_row(qv, q, q_row, d.head_dim, lane, false);
  float max_score = -INFINITY;
  for (int64_t j = key_begin; j < key_end; ++j) {
    if (!visible(masks, d, b, i, j)) continue;
    const int64_t kv_row = (b * d.seq_k + j) * d.heads_kv + hk;
    max_score =
        fmaxf(max_score, d.scale * dot_kv(qv, k, kv_row, b * d.seq_k + j, d.head_dim, lane));
  }
  float acc[kPerLane] = {};
  float sum = 0;
  if (max_score != -INFINITY) {
    for (int64_t j = key_begin; j < key_end; ++j) {
      if (!visible(masks, d, b, i, j)) continue;
      const int64_t kv_row = (b * d.seq_k + j) * d.heads_kv + hk;
      const float score = d.scale * dot_kv(qv, k, kv_row, b * d.seq_k + j, d.head_dim, lane);
      const float weight = expf(score - max_score);
      sum += weight;
      const float p = bf16_products ? round_to_bf16(weight) : weight;
#pragma unroll
      for (int t = 0; t < kPerLane; ++t) {
        const int64_t dd = lane + 32 * t;
        if (dd < d.head_dim) acc[t] += p * load_kv(v, kv_row * d.head_dim + dd, b * d.seq_k + j);
      }
    }
  }
#pragma unroll
  for (int t = 0; t < kPerLane; ++t) {
    const int64_t dd = lane + 32 * t;
    if (dd < d.head_dim) store(out, out_row * d.head_dim + dd, sum > 0 ? acc[t] / sum : 0.0f);
  }
  if (lane == 0) lse[lse_row] = max_score == -INFINITY ? -INFINITY : max_score + logf(sum);
}

// The LSE merge of two partials over disjoint keys (ref::attention_merge): a side with lse -inf
// contributes nothing, both -inf give out 0 and lse -inf.
struct MergeWeights {
  float a, b, sum, lse;
  bool empty;
};
__device__ __forceinline__ MergeWeights merge_weights(float lse_a, float lse_b) {
  const float m = fmaxf(lse_a, lse_b);
  const bool empty = m == -INFINITY;
  const float wa = empty ? 0.0f : expf(lse_a - m);
  const float wb = empty ? 0.0f : expf(lse_b - m);
  return {wa, wb, wa + wb, empty ? -INFINITY : m + logf(wa + wb), empty};
}
__device__ __forceinline__ float merged(const MergeWeights& w, float out_a, float out_b) {
  const float from_a = w.a > 0 ? w.a * out_a : 0.0f;
  const float from_b = w.b > 0 ? w.b * out_b : 0.0f;
  return w.empty ? 0.0f : (from_a + from_b) / w.sum;
}

// Split-K's second pass: one warp per query row merges the key blocks' f32 partials (forward
// kernel, `blocks` of them) in block order, keeping the running out in registers, and writes
// out (rounded once to its dtype) and lse.
__global__ void merge_key_blocks_kernel(DeviceFloats out, float* lse, const float* partial_out,
                                        const float* partial_lse, Dims d, int64_t blocks) {
  const int lane = threadIdx.x % 32;
  const int64_t rows = d.batch * d.heads_q * d.seq_q;
  const int64_t r = blockIdx.x * static_cast<int64_t>(kWarpsPerBlock) + threadIdx.x / 32;
  if (r >= rows) return;
  const int64_t i = r % d.seq_q, h = (r / d.seq_q) % d.heads_q, b = r / (d.seq_q * d.heads_q);
  const int64_t q_row = (b * d.seq_q + i) * d.heads_q + h;
  float acc[kPerLane];
  float acc_lse = partial_lse[r];
#pragma unroll
  for (int t = 0; t < kPerLane; ++t) {
    const int64_t dd = lane + 32 * t;
    acc[t] = dd < d.head_dim ? partial_out[q_row * d.head_dim + dd] : 0.0f;
  }
  for (int64_t y = 1; y < blocks; ++y) {
    const MergeWeights w = merge_weights(acc_lse, partial_lse[y * rows + r]);
    const float* block_out = partial_out + (y * rows + q_row) * d.head_dim;
#pragma unroll
    for (int t = 0; t < kPerLane; ++t) {
      const int64_t dd = lane + 32 * t;
      if (dd < d.head_dim) acc[t] = merged(w, acc[t], block_out[dd]);
    }
    acc_lse = w.lse;
  }
#pragma unroll
  for (int t = 0; t < kPerLane; ++t) {
    const int64_t dd = lane + 32 * t;
    if (dd < d.head_dim) store(out, q_row * d.head_dim + dd, acc[t]);
  }
  if (lane == 0) lse[r] = acc_lse;
}

// The probability and dS of one visible (query row, key row) pair, from recomputed scores.
struct PairGrad {
  float prob, d_score;
};
__device__ __forceinline__ PairGrad pair_grad(const float (&qv)[kPerLane],
                                              const float (&gv)[kPerLane], float row_lse,
                                              float delta, const KvRows& k, const KvRows& v,
                                              int64_t kv_row, int64_t cache_row, const Dims& d,
                                              int lane, bool bf16_products) {
  const float prob = expf(d.scale * dot_kv(qv, k, kv_row, cache_row, d.head_dim, lane) - row_lse);
  const float d_score = prob * (dot_kv(gv, v, kv_row, cache_row, d.head_dim, lane) - delta);
  if (!bf16_products) return {prob, d_score};
  return {round_to_bf16(prob), round_to_bf16(d_score)};
}

// delta = d_out_i · out_i (d_out as the products use it).
__device__ __forceinline__ float row_delta(const float (&gv)[kPerLane], ConstDeviceFloats out,
                                           int64_t q_row, int64_t D, int lane) {
  float sum = 0;
#pragma unroll
  for (int t = 0; t < kPerLane; ++t) {
    const int64_t dd = lane + 32 * t;
    if (dd < D) sum += gv[t] * load(out, q_row * D + dd);
  }
  return warp_sum(sum);
}

// dq: one warp per query row (b, h, i), over the keys in order.
__global__ void backward_dq_kernel(float* dq, ConstDeviceFloats d_out, ConstDeviceFloats out,
                                   const float* lse, ConstDeviceFloats q, KvRows k, KvRows v,
                                   Masks masks, Dims d, bool bf16_products) {
  const int lane = threadIdx.x % 32;
  const int64_t r = blockIdx.x * static_cast<int64_t>(kWarpsPerBlock) + threadIdx.x / 32;
  if (r >= d.batch * d.heads_q * d.seq_q) return;
  const float row_lse = lse[r];
  if (row_lse == -INFINITY) return;  // the row saw no key anywhere
  const int64_t i = r % d.seq_q, h = (r / d.seq_q) % d.heads_q, b = r / (d.seq_q * d.heads_q);
  const int64_t hk = h / d.group;
  const int64_t q_row = (b * d.seq_q + i) * d.heads_q + h;
  float qv[kPerLane], gv[kPerLane];
  load_row(qv, q, q_row, d.head_dim, lane, false);
  load_row(gv, d_out, q_row, d.head_dim, lane, bf16_products);
  const float delta = row_delta(gv, out, q_row, d.head_dim, lane);
  float acc[kPerLane] = {};
  for (int64_t j = 0; j < d.seq_k; ++j) {
    if (!visible(masks, d, b, i, j)) continue;
    const int64_t kv_row = (b * d.seq_k + j) * d.heads_kv + hk;
    const PairGrad g =
        pair_grad(qv, gv, row_lse, delta, k, v, kv_row, b * d.seq_k + j, d, lane, bf16_products);
    const float c = d.scale * g.d_score;
#pragma unroll
    for (int t = 0; t < kPerLane; ++t) {
      const int64_t dd = lane + 32 * t;
      if (dd < d.head_dim) acc[t] += c * load_kv(k, kv_row * d.head_dim + dd, b * d.seq_k + j);
    }
  }
#pragma unroll
  for (int t = 0; t < kPerLane; ++t) {
    const int64_t dd = lane + 32 * t;
    if (dd < d.head_dim) dq[q_row * d.head_dim + dd] += acc[t];
  }
}

// dk, dv: one warp per key row (b, hk, j), over the group's query heads and rows in order.
__global__ void backward_dkv_kernel(float* dk, float* dv, ConstDeviceFloats d_out,
                                    ConstDeviceFloats out, const float* lse, ConstDeviceFloats q,
                                    KvRows k, KvRows v, Masks masks, Dims d, bool bf16_products) {
  const int lane = threadIdx.x % 32;
  const int64_t r = blockIdx.x * static_cast<int64_t>(kWarpsPerBlock) + threadIdx.x / 32;
  if (r >= d.batch * d.heads_kv * d.seq_k) return;
  const int64_t j = r % d.seq_k, hk = (r / d.seq_k) % d.heads_kv, b = r / (d.seq_k * d.heads_kv);
  const int64_t kv_row = (b * d.seq_k + j) * d.heads_kv + hk;
  float dk_acc[kPerLane] = {}, dv_acc[kPerLane] = {};
  for (int64_t h = hk * d.group; h < (hk + 1) * d.group; ++h) {
    for (int64_t i = 0; i < d.seq_q; ++i) {
      if (!visible(masks, d, b, i, j)) continue;
      const float row_lse = lse[(b * d.heads_q + h) * d.seq_q + i];
      if (row_lse == -INFINITY) continue;
      const int64_t q_row = (b * d.seq_q + i) * d.heads_q + h;
      float qv[kPerLane], gv[kPerLane];
      load_row(qv, q, q_row, d.head_dim, lane, false);
      load_row(gv, d_out, q_row, d.head_dim, lane, bf16_products);
      const float delta = row_delta(gv, out, q_row, d.head_dim, lane);
      const PairGrad g =
          pair_grad(qv, gv, row_lse, delta, k, v, kv_row, b * d.seq_k + j, d, lane, bf16_products);
      const float c = d.scale * g.d_score;
#pragma unroll
      for (int t = 0; t < kPerLane; ++t) {
        dk_acc[t] += c * qv[t];
        dv_acc[t] += g.prob * gv[t];
      }
    }
  }
#pragma unroll
  for (int t = 0; t < kPerLane; ++t) {
    const int64_t dd = lane + 32 * t;
    if (dd < d.head_dim) {
      dk[kv_row * d.head_dim + dd] += dk_acc[t];
      dv[kv_row * d.head_dim + dd] += dv_acc[t];
    }
  }
}

// Visible and masked (query row, key row) pairs of every batch element (integer sums: exact).
__global__ void count_pairs_kernel(Masks masks, Dims d, unsigned long long* counts) {
  __shared__ unsigned long long shared[kThreads / 32];
  unsigned long long seen = 0;
  const int64_t pairs = d.batch * d.seq_q * d.seq_k;
  MAXCTX_GRID_STRIDE(x, pairs) {
    const int64_t j = x % d.seq_k, i = (x / d.seq_k) % d.seq_q, b = x / (d.seq_k * d.seq_q);
    seen += visible(masks, d, b, i, j) ? 1 : 0;
  }
  seen = block_sum(seen, shared);
  if (threadIdx.x == 0) atomicAdd(counts, seen);
}

__global__ void merge_kernel(float* out, float* lse, const float* out_a, const float* lse_a,
                             const float* out_b, const float* lse_b, int64_t seq_q, int64_t heads_q,
                             int64_t head_dim, int64_t rows) {
  MAXCTX_GRID_STRIDE(l, rows) {
    const int64_t i = l % seq_q, h = (l / seq_q) % heads_q, b = l / (seq_q * heads_q);
    const MergeWeights w = merge_weights(lse_a[l], lse_b[l]);
    const int64_t row = ((b * seq_q + i) * heads_q + h) * head_dim;
    for (int64_t dd = 0; dd < head_dim; ++dd)
      out[row + dd] = merged(w, out_a[row + dd], out_b[row + dd]);
    lse[l] = w.lse;
  }
}

unsigned warp_grid(int64_t rows) {
  const int64_t blocks = (rows + kWarpsPerBlock - 1) / kWarpsPerBlock;
  return row_grid(blocks);
}

}  // namespace

void attention_forward_rows(DeviceFloats out, float* lse, ConstDeviceFloats q, KvRows k, KvRows v,
                            const AttentionMasks& masks, const AttentionDims& d,
                            bool bf16_products) {
  const int64_t rows = d.batch * d.heads_q * d.seq_q;
  if (rows == 0) return;
  forward_kernel<<<warp_grid(rows), 32 * kWarpsPerBlock>>>(out, lse, q, k, v, masks, d,
                                                           bf16_products, d.seq_k);
  MAXCTX_CUDA_LAUNCHED("attention_forward_reference");
}

void single_query_attention_rows(DeviceFloats out, float* lse, ConstDeviceFloats q, KvRows k,
                                 KvRows v, const AttentionMasks& masks, const AttentionDims& d) {
  const int64_t rows = d.batch * d.heads_q * d.seq_q;
  if (rows == 0) return;
  const KeySplit split = decode_key_split(d.seq_k, rows);
  if (split.blocks == 1) return attention_forward_rows(out, lse, q, k, v, masks, d, false);
  const size_t out_floats = static_cast<size_t>(split.blocks * rows * d.head_dim);
  auto* partial_out = static_cast<float*>(scratch(
      Scratch::kKeyBlockPartials, (out_floats + static_cast<size_t>(split.blocks * rows)) * 4));
  float* partial_lse = partial_out + out_floats;
  const dim3 grid(warp_grid(rows), static_cast<unsigned>(split.blocks));
  forward_kernel<<<grid, 32 * kWarpsPerBlock>>>(DeviceFloats{partial_out, false}, partial_lse, q, k,
                                                v, masks, d, false, split.block_keys);
  MAXCTX_CUDA_LAUNCHED("single_query_attention key blocks");
  merge_key_blocks_kernel<<<warp_grid(rows), 32 * kWarpsPerBlock>>>(out, lse, partial_out,
                                                                    partial_lse, d, split.blocks);
  MAXCTX_CUDA_LAUNCHED("single_query_attention merge");
}

void attention_backward_rows(float* dq, float* dk, float* dv, ConstDeviceFloats d_out,
                             ConstDeviceFloats out, const float* lse, ConstDeviceFloats q, KvRows k,
                             KvRows v, const AttentionMasks& masks, const AttentionDims& d,
                             bool bf16_products) {
  const int64_t q_rows = d.batch * d.heads_q * d.seq_q;
  const int64_t kv_rows = d.batch * d.heads_kv * d.seq_k;
  if (q_rows == 0 || kv_rows == 0) return;
  backward_dq_kernel<<<warp_grid(q_rows), 32 * kWarpsPerBlock>>>(dq, d_out, out, lse, q, k, v,
                                                                 masks, d, bf16_products);
  MAXCTX_CUDA_LAUNCHED("attention_backward_reference dq");
  backward_dkv_kernel<<<warp_grid(kv_rows), 32 * kWarpsPerBlock>>>(dk, dv, d_out, out, lse, q, k, v,
                                                                   masks, d, bf16_products);
  MAXCTX_CUDA_LAUNCHED("attention_backward_reference dk dv");
}

int64_t count_visible_pairs(const AttentionMasks& masks, const AttentionDims& d) {
  const int64_t pairs = d.batch * d.seq_q * d.seq_k;
  if (pairs == 0) return 0;
  auto* counts = static_cast<unsigned long long*>(scratch(Scratch::kSmall, sizeof(long long)));
  MAXCTX_CUDA_CHECK(cudaMemset(counts, 0, sizeof *counts));
  count_pairs_kernel<<<grid_for(pairs), kThreads>>>(masks, d, counts);
  MAXCTX_CUDA_LAUNCHED("count_pairs");
  unsigned long long seen = 0;
  MAXCTX_CUDA_CHECK(cudaMemcpy(&seen, counts, sizeof seen, cudaMemcpyDeviceToHost));
  return static_cast<int64_t>(seen);
}

void attention_merge(float* out, float* lse, const float* out_a, const float* lse_a,
                     const float* out_b, const float* lse_b, int64_t batch, int64_t seq_q,
                     int64_t heads_q, int64_t head_dim) {
  const int64_t rows = batch * seq_q * heads_q;
  if (rows == 0) return;
  merge_kernel<<<grid_for(rows), kThreads>>>(out, lse, out_a, lse_a, out_b, lse_b, seq_q, heads_q,
                                             head_dim, rows);
  MAXCTX_CUDA_LAUNCHED("attention_merge");
}

}  // namespace maxctx::kernels::cuda

// Flash attention on plain FFMA tiles: the fp32 forward (fp32 accuracy, never TF32) and the
// deterministic backward for f32 and bf16 inputs (bf16: operands rounded per kernels.h).
//
// All three kernels use 128 threads over a 32 × 32 tile: thread t owns row t / 4 of the tile and,
// of the other side, columns t % 4 + 4j (8 keys or queries) and dims t % 4 + 4i (D / 4 of the
// row's accumulator, in registers). The 4 threads of a row are adjacent lanes, so row
// reductions are two shuffles. Shared rows are D + 1 floats: the 8 rows a warp reads at one
// column land in distinct banks, and the 4 columns t % 4 + 4j of one row too.
//
// Backward structure (no atomics, so the bits never depend on scheduling): a pre-pass gives
// delta_i = dO_i·O_i; dk/dv: one CTA per (key block, kv head), looping over the group's query
// heads and the query blocks in a fixed order; dq: one CTA per (query block, query head), looping
// over the key blocks. Each recomputes P = exp(s·scale - lse) and dS = P·(dO·vᵀ - delta).
#include <string>

#include "maxctx/kernels/cuda/cuda_check.h"
#include "maxctx/kernels/cuda/flash_common.cuh"

namespace maxctx::kernels::cuda::flash {
namespace {

constexpr int kThreads = 128;
constexpr int kTile = 32;  // rows and columns of every FFMA tile
constexpr int kScoreStride = kTile + 1;

__device__ inline void store_out(float* p, float x) { *p = x; }
__device__ inline void store_out(__nv_bfloat16* p, float x) { *p = __float2bfloat16_rn(x); }

// dst (32, D + 1) floats = the rows row_offset(r) of src (< 0: zeros), each value through
// convert().
template <int D, typename T, typename RowOffset, typename Convert>
__device__ inline void load_tile(float* dst, const T* src, RowOffset row_offset, Convert convert) {
  for (int i = threadIdx.x; i < kTile * D; i += kThreads) {
    const int r = i / D, d = i % D;
    const int64_t offset = row_offset(r);
    dst[r * (D + 1) + d] = offset >= 0 ? convert(to_float(src[offset + d])) : 0.0f;
  }
}

struct Identity {
  __device__ float operator()(float x) const { return x; }
};
// The bf16 rule's rounding of d_out (nothing for f32 inputs).
template <typename In>
struct RoundOperand {
  __device__ float operator()(float x) const { return round_operand<In>(x); }
};

template <int D>
__device__ inline float dot_rows(const float* a, const float* b) {
  float sum = 0.0f;
#pragma unroll 16
  for (int d = 0; d < D; ++d) sum = fmaf(a[d], b[d], sum);
  return sum;
}

// ---------------------------------------------------------------- fp32 forward

template <int D, typename Out>
__global__ void __launch_bounds__(kThreads)
    forward_ffma_kernel(Out* out, float* lse, const float* q, const float* k, const float* v,
                        Masks m, Shape g) {
  constexpr int kStride = D + 1;
  __shared__ float q_s[kTile * kStride];
  __shared__ float kv_s[kTile * kStride];  // K, then V of the same key block
  __shared__ float p_s[kTile * kScoreStride];
  __shared__ int32_t row_pos[kTile], row_seg[kTile], key_pos[kTile], key_seg[kTile];

  const int tile = g.n_qb * g.n_chunks - 1 - static_cast<int>(blockIdx.x);
  const int qb = tile / g.n_chunks, chunk = tile % g.n_chunks;
  const int hk = blockIdx.y, b = blockIdx.z;
  const int r = threadIdx.x / 4, c4 = threadIdx.x % 4;

  load_tile<D>(
      q_s, q,
      [&](int row_index) -> int64_t {
        const TileRow row = tile_row(g, qb, chunk, hk, row_index);
        return row.valid
                   ? ((static_cast<int64_t>(b) * g.seq_q + row.token) * g.heads_q + row.head) * D
                   : -1;
      },
      Identity{});
  if (threadIdx.x < kTile) {
    const TileRow row = tile_row(g, qb, chunk, hk, threadIdx.x);
    const int64_t t = static_cast<int64_t>(b) * g.seq_q + row.token;
    row_pos[threadIdx.x] = row.valid ? m.q_pos[t] : 0;
    row_seg[threadIdx.x] = row.valid ? m.q_seg[t] : 0;
  }
  __syncthreads();
  const int32_t my_pos = row_pos[r], my_seg = row_seg[r];

  float o[D / 4];
#pragma unroll
  for (int i = 0; i < D / 4; ++i) o[i] = 0.0f;
  float row_max = -INFINITY, row_sum = 0.0f;  // row_sum: this thread's part
  const BlockBounds q_bounds = m.q_bounds[b * g.n_qb + qb];

  for (int kb = 0; kb < g.n_kb; ++kb) {
    const TileMask kind = classify_tile(q_bounds, m.k_bounds[b * g.n_kb + kb], g.window);
    if (kind == TileMask::kSkip) continue;
    const int keys = g.keys_in_kb(kb);
    const bool masked = kind == TileMask::kPartial || keys < kTile;
    const int64_t key0 = static_cast<int64_t>(b) * g.seq_k + kb * kTile;
    const auto kv_offset = [&](int row) -> int64_t {
      return row < keys ? ((key0 + row) * g.heads_kv + hk) * D : -1;
    };
    __syncthreads();  // the previous block's V is no longer read
    load_tile<D>(kv_s, k, kv_offset, Identity{});
    if (threadIdx.x < kTile) {
      key_pos[threadIdx.x] = threadIdx.x < keys ? m.k_pos[key0 + threadIdx.x] : 0;
      key_seg[threadIdx.x] = threadIdx.x < keys ? m.k_seg[key0 + threadIdx.x] : 0;
    }
    __syncthreads();
    float s[8];
    float tile_max = -INFINITY;
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      const int key = c4 + 4 * j;
      float x = dot_rows<D>(q_s + r * kStride, kv_s + key * kStride) * g.scale;
      if (masked &&
          (key >= keys || !mask_visible(my_pos, my_seg, key_pos[key], key_seg[key], g.window))) {
        x = -INFINITY;
      }
      s[j] = x;
      tile_max = fmaxf(tile_max, x);
    }
    tile_max = fmaxf(tile_max, __shfl_xor_sync(0xffffffffu, tile_max, 1));
    tile_max = fmaxf(tile_max, __shfl_xor_sync(0xffffffffu, tile_max, 2));
    const float new_max = fmaxf(row_max, tile_max);
    const float base = new_max == -INFINITY ? 0.0f : new_max;  // no NaN from -inf - -inf
    const float rescale = expf(row_max - base);
    row_max = new_max;
    row_sum *= rescale;
#pragma unroll
    for (int i = 0; i < D / 4; ++i) o[i] *= rescale;
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      const float p = expf(s[j] - base);
      row_sum += p;
      p_s[r * kScoreStride + c4 + 4 * j] = p;
    }
    __syncthreads();  // every score of the block is done with K
    load_tile<D>(kv_s, v, kv_offset, Identity{});
    __syncthreads();
    for (int key = 0; key < kTile; ++key) {
      const float p = p_s[r * kScoreStride + key];
      const float* v_row = kv_s + key * kStride + c4;
#pragma unroll
      for (int i = 0; i < D / 4; ++i) o[i] = fmaf(p, v_row[4 * i], o[i]);
    }
  }

  row_sum += __shfl_xor_sync(0xffffffffu, row_sum, 1);
  row_sum += __shfl_xor_sync(0xffffffffu, row_sum, 2);
  const TileRow row = tile_row(g, qb, chunk, hk, r);
  if (!row.valid) return;
  const int64_t out_row = (static_cast<int64_t>(b) * g.seq_q + row.token) * g.heads_q + row.head;
  const float inv = row_sum > 0.0f ? 1.0f / row_sum : 0.0f;
#pragma unroll
  for (int i = 0; i < D / 4; ++i) store_out(out + out_row * D + c4 + 4 * i, o[i] * inv);
  if (c4 == 0) {
    lse[(static_cast<int64_t>(b) * g.heads_q + row.head) * g.seq_q + row.token] =
        row_sum > 0.0f ? row_max + logf(row_sum) : -INFINITY;
  }
}

// ---------------------------------------------------------------- backward

// What both backward kernels read of one query block of one head: Q, dO (rounded as an operand),
// lse, delta and the mask inputs. Rows past Sq get lse = -inf (probability 0).
template <int D, typename In, typename DOut>
__device__ inline void load_query_block(float* q_s, float* do_s, float* lse_s, float* delta_s,
                                        int32_t* pos_s, int32_t* seg_s, const In* q,
                                        const DOut* d_out, const float* lse, const float* delta,
                                        const Masks& m, const Shape& g, int b, int h, int qb) {
  const int64_t token0 = static_cast<int64_t>(b) * g.seq_q + qb * kTile;
  const int tokens = min(kTile, g.seq_q - qb * kTile);
  const auto offset = [&](int row) -> int64_t {
    return row < tokens ? ((token0 + row) * g.heads_q + h) * D : -1;
  };
  load_tile<D>(q_s, q, offset, Identity{});
  load_tile<D>(do_s, d_out, offset, RoundOperand<In>{});
  if (threadIdx.x < kTile) {
    const int row = threadIdx.x;
    const int64_t stat = (static_cast<int64_t>(b) * g.heads_q + h) * g.seq_q + qb * kTile + row;
    lse_s[row] = row < tokens ? lse[stat] : -INFINITY;
    delta_s[row] = row < tokens ? delta[stat] : 0.0f;
    pos_s[row] = row < tokens ? m.q_pos[token0 + row] : 0;
    seg_s[row] = row < tokens ? m.q_seg[token0 + row] : 0;
  }
}

// K and V of one key block of one kv head, and the mask inputs; rows past Sk are zeros.
template <int D, typename In>
__device__ inline void load_key_block(float* k_s, float* v_s, int32_t* pos_s, int32_t* seg_s,
                                      const In* k, const In* v, const Masks& m, const Shape& g,
                                      int b, int hk, int kb) {
  const int64_t key0 = static_cast<int64_t>(b) * g.seq_k + kb * kTile;
  const int keys = g.keys_in_kb(kb);
  const auto offset = [&](int row) -> int64_t {
    return row < keys ? ((key0 + row) * g.heads_kv + hk) * D : -1;
  };
  load_tile<D>(k_s, k, offset, Identity{});
  load_tile<D>(v_s, v, offset, Identity{});
  if (threadIdx.x < kTile) {
    pos_s[threadIdx.x] = threadIdx.x < keys ? m.k_pos[key0 + threadIdx.x] : 0;
    seg_s[threadIdx.x] = threadIdx.x < keys ? m.k_seg[key0 + threadIdx.x] : 0;
  }
}

// Probability and score gradient of one (query, key) pair: p = exp(s·scale - lse), dS =
// p·(dp - delta), both 0 where the pair is masked or the row saw no key.
struct PairGrad {
  float p, ds;
};
__device__ inline PairGrad pair_grad(float s, float dp, float row_lse, float row_delta,
                                     bool visible, float scale) {
  if (!visible || row_lse == -INFINITY) return PairGrad{0.0f, 0.0f};
  const float p = expf(s * scale - row_lse);
  return PairGrad{p, p * (dp - row_delta)};
}

// The shared memory of a backward kernel: four (32, D + 1) tiles, two score tiles, the rows'
// lse/delta and the mask inputs of both blocks.
struct BackwardSmem {
  float *q, *d_out, *k, *v, *p, *ds, *lse, *delta;
  int32_t *q_pos, *q_seg, *k_pos, *k_seg;
};
template <int D>
__device__ inline BackwardSmem carve_backward_smem(unsigned char* raw) {
  float* f = reinterpret_cast<float*>(raw);
  BackwardSmem s;
  s.q = f;
  s.d_out = s.q + kTile * (D + 1);
  s.k = s.d_out + kTile * (D + 1);
  s.v = s.k + kTile * (D + 1);
  s.p = s.v + kTile * (D + 1);
  s.ds = s.p + kTile * kScoreStride;
  s.lse = s.ds + kTile * kScoreStride;
  s.delta = s.lse + kTile;
  s.q_pos = reinterpret_cast<int32_t*>(s.delta + kTile);
  s.q_seg = s.q_pos + kTile;
  s.k_pos = s.q_seg + kTile;
  s.k_seg = s.k_pos + kTile;
  return s;
}
template <int D>
constexpr size_t backward_smem_bytes() {
  return (4 * kTile * (D + 1) + 2 * kTile * kScoreStride + 2 * kTile) * sizeof(float) +
         4 * kTile * sizeof(int32_t);
}

// p and dS of query row qi and key row ki of the tiles in shared memory; masked: test the pair
// (rows past tokens / keys are never visible), else every pair of the tile is.
template <int D>
__device__ inline PairGrad tile_pair(const BackwardSmem& sm, int qi, int ki, bool masked,
                                     int tokens, int keys, const Shape& g) {
  const float s = dot_rows<D>(sm.q + qi * (D + 1), sm.k + ki * (D + 1));
  const float dp = dot_rows<D>(sm.d_out + qi * (D + 1), sm.v + ki * (D + 1));
  const bool visible =
      !masked || (qi < tokens && ki < keys &&
                  mask_visible(sm.q_pos[qi], sm.q_seg[qi], sm.k_pos[ki], sm.k_seg[ki], g.window));
  return pair_grad(s, dp, sm.lse[qi], sm.delta[qi], visible, g.scale);
}

// One CTA per (key block, kv head, batch element): dk, dv of its 32 keys over every query head
// of the group and every query block, in that fixed order.
template <int D, typename In, typename DOut>
__global__ void __launch_bounds__(kThreads)
    backward_dkdv_kernel(float* dk, float* dv, const DOut* d_out, const float* lse,
                         const float* delta, const In* q, const In* k, const In* v, Masks m,
                         Shape g) {
  constexpr int kStride = D + 1;
  extern __shared__ __align__(16) unsigned char smem[];
  const BackwardSmem sm = carve_backward_smem<D>(smem);
  const int kb = blockIdx.x, hk = blockIdx.y, b = blockIdx.z;
  const int r = threadIdx.x / 4, c4 = threadIdx.x % 4;  // r: this thread's key
  const int keys = g.keys_in_kb(kb);
  load_key_block<D>(sm.k, sm.v, sm.k_pos, sm.k_seg, k, v, m, g, b, hk, kb);

  float dk_acc[D / 4], dv_acc[D / 4];
#pragma unroll
  for (int i = 0; i < D / 4; ++i) dk_acc[i] = dv_acc[i] = 0.0f;
  const BlockBounds k_bounds = m.k_bounds[b * g.n_kb + kb];

  for (int head = hk * g.group; head < (hk + 1) * g.group; ++head) {
    for (int qb = 0; qb < g.n_qb; ++qb) {
      const TileMask kind = classify_tile(m.q_bounds[b * g.n_qb + qb], k_bounds, g.window);
      if (kind == TileMask::kSkip) continue;
      const int tokens = min(kTile, g.seq_q - qb * kTile);
      const bool masked = kind == TileMask::kPartial || tokens < kTile || keys < kTile;
      __syncthreads();  // the previous query block is no longer read
      load_query_block<D>(sm.q, sm.d_out, sm.lse, sm.delta, sm.q_pos, sm.q_seg, q, d_out, lse,
                          delta, m, g, b, head, qb);
      __syncthreads();
#pragma unroll
      for (int j = 0; j < 8; ++j) {
        const int qi = c4 + 4 * j;
        const PairGrad pg = tile_pair<D>(sm, qi, r, masked, tokens, keys, g);
        sm.p[r * kScoreStride + qi] = round_operand<In>(pg.p);
        sm.ds[r * kScoreStride + qi] = round_operand<In>(pg.ds);
      }
      __syncthreads();
      for (int qi = 0; qi < kTile; ++qi) {
        const float p = sm.p[r * kScoreStride + qi], ds = sm.ds[r * kScoreStride + qi];
        const float* do_row = sm.d_out + qi * kStride + c4;
        const float* q_row = sm.q + qi * kStride + c4;
#pragma unroll
        for (int i = 0; i < D / 4; ++i) {
          dv_acc[i] = fmaf(p, do_row[4 * i], dv_acc[i]);
          dk_acc[i] = fmaf(ds, q_row[4 * i], dk_acc[i]);
        }
      }
    }
  }
  if (r >= keys) return;
  const int64_t row = ((static_cast<int64_t>(b) * g.seq_k + kb * kTile + r) * g.heads_kv + hk) * D;
#pragma unroll
  for (int i = 0; i < D / 4; ++i) {
    dk[row + c4 + 4 * i] += g.scale * dk_acc[i];
    dv[row + c4 + 4 * i] += dv_acc[i];
  }
}

// One CTA per (query block, query head, batch element): dq of its 32 tokens over every key
// block, in order.
template <int D, typename In, typename DOut>
__global__ void __launch_bounds__(kThreads)
    backward_dq_kernel(float* dq, const DOut* d_out, const float* lse, const float* delta,
                       const In* q, const In* k, const In* v, Masks m, Shape g) {
  constexpr int kStride = D + 1;
  extern __shared__ __align__(16) unsigned char smem[];
  const BackwardSmem sm = carve_backward_smem<D>(smem);
  const int qb = blockIdx.x, head = blockIdx.y, b = blockIdx.z;
  const int hk = head / g.group;
  const int r = threadIdx.x / 4, c4 = threadIdx.x % 4;  // r: this thread's query row
  const int tokens = min(kTile, g.seq_q - qb * kTile);
  load_query_block<D>(sm.q, sm.d_out, sm.lse, sm.delta, sm.q_pos, sm.q_seg, q, d_out, lse, delta, m,
                      g, b, head, qb);

  float dq_acc[D / 4];
#pragma unroll
  for (int i = 0; i < D / 4; ++i) dq_acc[i] = 0.0f;
  const BlockBounds q_bounds = m.q_bounds[b * g.n_qb + qb];

  for (int kb = 0; kb < g.n_kb; ++kb) {
    const TileMask kind = classify_tile(q_bounds, m.k_bounds[b * g.n_kb + kb], g.window);
    if (kind == TileMask::kSkip) continue;
    const int keys = g.keys_in_kb(kb);
    const bool masked = kind == TileMask::kPartial || tokens < kTile || keys < kTile;
    __syncthreads();  // the previous key block is no longer read
    load_key_block<D>(sm.k, sm.v, sm.k_pos, sm.k_seg, k, v, m, g, b, hk, kb);
    __syncthreads();
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      const int key = c4 + 4 * j;
      const PairGrad pg = tile_pair<D>(sm, r, key, masked, tokens, keys, g);
      sm.ds[r * kScoreStride + key] = round_operand<In>(pg.ds);
    }
    __syncthreads();
    for (int key = 0; key < kTile; ++key) {
      const float ds = sm.ds[r * kScoreStride + key];
      const float* k_row = sm.k + key * kStride + c4;
#pragma unroll
      for (int i = 0; i < D / 4; ++i) dq_acc[i] = fmaf(ds, k_row[4 * i], dq_acc[i]);
    }
  }
  if (r >= tokens) return;
  const int64_t row = ((static_cast<int64_t>(b) * g.seq_q + qb * kTile + r) * g.heads_q + head) * D;
#pragma unroll
  for (int i = 0; i < D / 4; ++i) dq[row + c4 + 4 * i] += g.scale * dq_acc[i];
}

template <int D, typename Out>
void forward_for_dim(Out* out, float* lse, const float* q, const float* k, const float* v,
                     const Masks& m, const Shape& g, cudaStream_t stream) {
  const dim3 grid(g.n_qb * g.n_chunks, g.heads_kv, g.batch);
  forward_ffma_kernel<D, Out><<<grid, kThreads, 0, stream>>>(out, lse, q, k, v, m, g);
  MAXCTX_CUDA_LAUNCHED("flash attention forward (fp32)");
}

template <int D, typename In, typename DOut>
void backward_for_dim(float* dq, float* dk, float* dv, const DOut* d_out, const float* lse,
                      const float* delta, const In* q, const In* k, const In* v, const Masks& m,
                      const Shape& g, cudaStream_t stream) {
  constexpr size_t smem = backward_smem_bytes<D>();
  static const bool kSharedMemoryAllowed =
      allow_dynamic_shared_memory(backward_dkdv_kernel<D, In, DOut>, smem) &&
      allow_dynamic_shared_memory(backward_dq_kernel<D, In, DOut>, smem);
  (void)kSharedMemoryAllowed;
  backward_dkdv_kernel<D, In, DOut><<<dim3(g.n_kb, g.heads_kv, g.batch), kThreads, smem, stream>>>(
      dk, dv, d_out, lse, delta, q, k, v, m, g);
  MAXCTX_CUDA_LAUNCHED("flash attention backward (dk, dv)");
  backward_dq_kernel<D, In, DOut><<<dim3(g.n_qb, g.heads_q, g.batch), kThreads, smem, stream>>>(
      dq, d_out, lse, delta, q, k, v, m, g);
  MAXCTX_CUDA_LAUNCHED("flash attention backward (dq)");
}

[[noreturn]] void unsupported_dim(int dim) {
  cuda_error(
      ("cuda flash attention: head_dim " + std::to_string(dim) + " is not supported (64 or 128)")
          .c_str());
}

}  // namespace

void launch_forward_ffma(void* out, Elem out_type, float* lse, const float* q, const float* k,
                         const float* v, const Masks& m, const Shape& g, void* stream) {
  const auto s = static_cast<cudaStream_t>(stream);
  with_elem(out_type, [&](auto out_elem) {
    using Out = decltype(out_elem);
    Out* o = static_cast<Out*>(out);
    if (g.dim == 64) return forward_for_dim<64>(o, lse, q, k, v, m, g, s);
    if (g.dim == 128) return forward_for_dim<128>(o, lse, q, k, v, m, g, s);
    unsupported_dim(g.dim);
  });
}

void launch_backward(float* dq, float* dk, float* dv, const void* d_out, Elem d_out_type,
                     const float* lse, const float* delta, const void* q, const void* k,
                     const void* v, Elem in_type, const Masks& m, const Shape& g, void* stream) {
  const auto s = static_cast<cudaStream_t>(stream);
  with_elem(in_type, [&](auto in_elem) {
    using In = decltype(in_elem);
    const In* qi = static_cast<const In*>(q);
    const In* ki = static_cast<const In*>(k);
    const In* vi = static_cast<const In*>(v);
    with_elem(d_out_type, [&](auto d_out_elem) {
      using DOut = decltype(d_out_elem);
      const DOut* d_o = static_cast<const DOut*>(d_out);
      if (g.dim == 64) {
        return backward_for_dim<64>(dq, dk, dv, d_o, lse, delta, qi, ki, vi, m, g, s);
      }
      if (g.dim == 128) {
        return backward_for_dim<128>(dq, dk, dv, d_o, lse, delta, qi, ki, vi, m, g, s);
      }
      unsupported_dim(g.dim);
    });
  });
}

}  // namespace maxctx::kernels::cuda::flash

// Flash attention forward for bf16 q/k/v on mma.sync.m16n8k16 (bf16 products, fp32 sums):
// the portable kernel (sm_80 instructions; the Hopper wgmma/TMA form is future work).
//
// One CTA = one tile of 64 packed query rows (heads of one kv group × tokens, flash_common.cuh)
// against every key block of 64 keys it may see; 4 warps, each owning 16 rows. A warp keeps its
// Q fragments in registers for the whole loop, computes S (16 × 64) with 4·(D/16)·8 mma, the
// online softmax in fp32 on the accumulator fragments, and O (16 × D) += P·V with P rounded to
// bf16 and reused as the A operand straight from the S accumulators (the C layout of two n-tiles
// is the A layout of one k-step). Fragment layouts, PTX ISA "mma.m16n8k16" for .bf16, with
// g = lane / 4 and t = lane % 4:
//   A (16×16, row-major): a0 = (g, 2t..2t+1), a1 = (g+8, 2t..), a2 = (g, 2t+8..), a3 = (g+8,
//   2t+8..) B (16×8, "col"):      b0 = (k 2t..2t+1, n g), b1 = (k 2t+8..2t+9, n g) C (16×8, fp32):
//   c0,c1 = (g, 2t..2t+1), c2,c3 = (g+8, 2t..2t+1)
// The lower half of each 32-bit register holds the lower column (or k) index. Shared-memory rows
// are D + 8 bf16 long: 4 words of padding put the 8 rows g of a fragment load in distinct banks
// ((D/2 + 4)·g + t mod 32 is distinct for g < 8, t < 4), and the 16-bit V loads likewise.
#include <string>

#include "maxctx/kernels/cuda/cuda_check.h"
#include "maxctx/kernels/cuda/flash_common.cuh"

namespace maxctx::kernels::cuda::flash {
namespace {

constexpr int kThreads = 128;

__device__ inline void mma_bf16(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
      "{%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// Two bf16 of consecutive columns as one register (lower column in the low half).
__device__ inline uint32_t load_pair(const __nv_bfloat16* p) {
  return *reinterpret_cast<const uint32_t*>(p);
}
__device__ inline uint32_t pack_bits(const __nv_bfloat16* lo, const __nv_bfloat16* hi) {
  return static_cast<uint32_t>(*reinterpret_cast<const uint16_t*>(lo)) |
         (static_cast<uint32_t>(*reinterpret_cast<const uint16_t*>(hi)) << 16);
}
__device__ inline uint32_t pack_floats(float lo, float hi) {
  const __nv_bfloat162 pair = __floats2bfloat162_rn(lo, hi);  // .x = lo: the low half
  return *reinterpret_cast<const uint32_t*>(&pair);
}

__device__ inline void store_out(float* p, float x) { *p = x; }
__device__ inline void store_out(__nv_bfloat16* p, float x) { *p = __float2bfloat16_rn(x); }

// rows (64) × D bf16 from global rows (row_offset(r) < 0: zeros) into shared rows of `stride`.
template <int D, typename RowOffset>
__device__ inline void load_rows(__nv_bfloat16* dst, int stride, const __nv_bfloat16* src,
                                 RowOffset row_offset) {
  constexpr int kVecs = D / 8;  // 16-byte vectors per row
  for (int i = threadIdx.x; i < 64 * kVecs; i += kThreads) {
    const int r = i / kVecs, col = (i % kVecs) * 8;
    const int64_t offset = row_offset(r);
    uint4 value = make_uint4(0, 0, 0, 0);
    if (offset >= 0) value = *reinterpret_cast<const uint4*>(src + offset + col);
    *reinterpret_cast<uint4*>(dst + r * stride + col) = value;
  }
}

template <int D, typename Out>
__global__ void __launch_bounds__(kThreads)
    forward_mma_kernel(Out* out, float* lse, const __nv_bfloat16* q, const __nv_bfloat16* k,
                       const __nv_bfloat16* v, Masks m, Shape g) {
  constexpr int kStride = D + 8;
  constexpr int kSteps = D / 16;    // k-steps of Q·Kᵀ
  constexpr int kDimTiles = D / 8;  // n-tiles of O
  static_assert(kMmaTileRows == 64 && kMmaBlockK == 64, "the kernel is written for 64 × 64");
  extern __shared__ __align__(16) unsigned char smem[];
  __nv_bfloat16* q_s = reinterpret_cast<__nv_bfloat16*>(smem);
  __nv_bfloat16* k_s = q_s + 64 * kStride;
  __nv_bfloat16* v_s = k_s + 64 * kStride;
  int32_t* row_pos = reinterpret_cast<int32_t*>(v_s + 64 * kStride);
  int32_t* row_seg = row_pos + 64;
  int32_t* key_pos = row_seg + 64;
  int32_t* key_seg = key_pos + 64;

  // Late query blocks (the most keys under a causal mask) start first.
  const int tile = g.n_qb * g.n_chunks - 1 - static_cast<int>(blockIdx.x);
  const int qb = tile / g.n_chunks, chunk = tile % g.n_chunks;
  const int hk = blockIdx.y, b = blockIdx.z;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int gq = lane / 4, t4 = lane % 4;

  load_rows<D>(q_s, kStride, q, [&](int r) -> int64_t {
    const TileRow row = tile_row(g, qb, chunk, hk, r);
    return row.valid ? ((static_cast<int64_t>(b) * g.seq_q + row.token) * g.heads_q + row.head) * D
                     : -1;
  });
  if (threadIdx.x < 64) {
    const TileRow row = tile_row(g, qb, chunk, hk, threadIdx.x);
    const int64_t t = static_cast<int64_t>(b) * g.seq_q + row.token;
    row_pos[threadIdx.x] = row.valid ? m.q_pos[t] : 0;
    row_seg[threadIdx.x] = row.valid ? m.q_seg[t] : 0;
  }
  __syncthreads();

  const int r0 = warp * 16 + gq;  // this thread's rows: r0 and r0 + 8
  uint32_t qa[kSteps][4];
#pragma unroll
  for (int s = 0; s < kSteps; ++s) {
    qa[s][0] = load_pair(q_s + r0 * kStride + s * 16 + 2 * t4);
    qa[s][1] = load_pair(q_s + (r0 + 8) * kStride + s * 16 + 2 * t4);
    qa[s][2] = load_pair(q_s + r0 * kStride + s * 16 + 8 + 2 * t4);
    qa[s][3] = load_pair(q_s + (r0 + 8) * kStride + s * 16 + 8 + 2 * t4);
  }
  const int32_t my_pos[2] = {row_pos[r0], row_pos[r0 + 8]};
  const int32_t my_seg[2] = {row_seg[r0], row_seg[r0 + 8]};

  float o[kDimTiles][4];
#pragma unroll
  for (int dt = 0; dt < kDimTiles; ++dt) o[dt][0] = o[dt][1] = o[dt][2] = o[dt][3] = 0.0f;
  float row_max[2] = {-INFINITY, -INFINITY};
  float row_sum[2] = {0.0f, 0.0f};  // this thread's part; the 4 threads of a row add at the end
  const BlockBounds q_bounds = m.q_bounds[b * g.n_qb + qb];

  for (int kb = 0; kb < g.n_kb; ++kb) {
    const TileMask kind = classify_tile(q_bounds, m.k_bounds[b * g.n_kb + kb], g.window);
    if (kind == TileMask::kSkip) continue;  // the same verdict for the whole CTA
    const int keys = g.keys_in_kb(kb);
    const bool masked = kind == TileMask::kPartial || keys < 64;
    __syncthreads();  // the previous block's K/V are no longer read
    const int64_t key0 = static_cast<int64_t>(b) * g.seq_k + kb * 64;
    const auto kv_offset = [&](int r) -> int64_t {
      return r < keys ? ((key0 + r) * g.heads_kv + hk) * D : -1;
    };
    load_rows<D>(k_s, kStride, k, kv_offset);
    load_rows<D>(v_s, kStride, v, kv_offset);
    if (threadIdx.x < 64) {
      key_pos[threadIdx.x] = threadIdx.x < keys ? m.k_pos[key0 + threadIdx.x] : 0;
      key_seg[threadIdx.x] = threadIdx.x < keys ? m.k_seg[key0 + threadIdx.x] : 0;
    }
    __syncthreads();

    float s[8][4];
#pragma unroll
    for (int nt = 0; nt < 8; ++nt) s[nt][0] = s[nt][1] = s[nt][2] = s[nt][3] = 0.0f;
#pragma unroll
    for (int st = 0; st < kSteps; ++st) {
#pragma unroll
      for (int nt = 0; nt < 8; ++nt) {
        const __nv_bfloat16* key_row = k_s + (nt * 8 + gq) * kStride + st * 16 + 2 * t4;
        mma_bf16(s[nt], qa[st], load_pair(key_row), load_pair(key_row + 8));
      }
    }

    float tile_max[2] = {-INFINITY, -INFINITY};
#pragma unroll
    for (int nt = 0; nt < 8; ++nt) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int half = e / 2, col = nt * 8 + 2 * t4 + (e % 2);
        float x = s[nt][e] * g.scale;
        if (masked && (col >= keys || !mask_visible(my_pos[half], my_seg[half], key_pos[col],
                                                    key_seg[col], g.window))) {
          x = -INFINITY;
        }
        s[nt][e] = x;
        tile_max[half] = fmaxf(tile_max[half], x);
      }
    }
    float base[2];
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      tile_max[half] = fmaxf(tile_max[half], __shfl_xor_sync(0xffffffffu, tile_max[half], 1));
      tile_max[half] = fmaxf(tile_max[half], __shfl_xor_sync(0xffffffffu, tile_max[half], 2));
      const float new_max = fmaxf(row_max[half], tile_max[half]);
      // A row that has seen no key yet keeps max -inf: exponents are taken against 0 then, so
      // that -inf - -inf never makes a NaN (every p and the rescale come out 0).
      base[half] = new_max == -INFINITY ? 0.0f : new_max;
      const float rescale = expf(row_max[half] - base[half]);
      row_max[half] = new_max;
      row_sum[half] *= rescale;
#pragma unroll
      for (int dt = 0; dt < kDimTiles; ++dt) {
        o[dt][2 * half] *= rescale;
        o[dt][2 * half + 1] *= rescale;
      }
    }
#pragma unroll
    for (int nt = 0; nt < 8; ++nt) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const float p = expf(s[nt][e] - base[e / 2]);
        row_sum[e / 2] += p;
        s[nt][e] = p;
      }
    }

    // O += P·V over 4 k-steps of 16 keys; A from the S accumulators of n-tiles 2j and 2j + 1.
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const uint32_t pa[4] = {pack_floats(s[2 * j][0], s[2 * j][1]),
                              pack_floats(s[2 * j][2], s[2 * j][3]),
                              pack_floats(s[2 * j + 1][0], s[2 * j + 1][1]),
                              pack_floats(s[2 * j + 1][2], s[2 * j + 1][3])};
      const __nv_bfloat16* v_rows = v_s + (j * 16 + 2 * t4) * kStride + gq;
#pragma unroll
      for (int dt = 0; dt < kDimTiles; ++dt) {
        const __nv_bfloat16* col = v_rows + dt * 8;
        mma_bf16(o[dt], pa, pack_bits(col, col + kStride),
                 pack_bits(col + 8 * kStride, col + 9 * kStride));
      }
    }
  }

#pragma unroll
  for (int half = 0; half < 2; ++half) {
    float sum = row_sum[half];
    sum += __shfl_xor_sync(0xffffffffu, sum, 1);
    sum += __shfl_xor_sync(0xffffffffu, sum, 2);
    const TileRow row = tile_row(g, qb, chunk, hk, r0 + 8 * half);
    if (!row.valid) continue;
    const int64_t out_row = (static_cast<int64_t>(b) * g.seq_q + row.token) * g.heads_q + row.head;
    const float inv = sum > 0.0f ? 1.0f / sum : 0.0f;  // a row that saw no key: out = 0
#pragma unroll
    for (int dt = 0; dt < kDimTiles; ++dt) {
      Out* dst = out + out_row * D + dt * 8 + 2 * t4;
      store_out(dst, o[dt][2 * half] * inv);
      store_out(dst + 1, o[dt][2 * half + 1] * inv);
    }
    if (t4 == 0) {
      lse[(static_cast<int64_t>(b) * g.heads_q + row.head) * g.seq_q + row.token] =
          sum > 0.0f ? row_max[half] + logf(sum) : -INFINITY;
    }
  }
}

template <int D, typename Out>
void launch_for_dim(Out* out, float* lse, const __nv_bfloat16* q, const __nv_bfloat16* k,
                    const __nv_bfloat16* v, const Masks& m, const Shape& g, cudaStream_t stream) {
  const size_t smem = 3 * 64 * (D + 8) * sizeof(__nv_bfloat16) + 4 * 64 * sizeof(int32_t);
  static const bool kSharedMemoryAllowed =
      allow_dynamic_shared_memory(forward_mma_kernel<D, Out>, smem);
  (void)kSharedMemoryAllowed;
  const dim3 grid(g.n_qb * g.n_chunks, g.heads_kv, g.batch);
  forward_mma_kernel<D, Out><<<grid, kThreads, smem, stream>>>(out, lse, q, k, v, m, g);
  MAXCTX_CUDA_LAUNCHED("flash attention forward (mma)");
}

}  // namespace

void launch_forward_mma(void* out, Elem out_type, float* lse, const void* q, const void* k,
                        const void* v, const Masks& m, const Shape& g, void* stream) {
  const auto* qd = static_cast<const __nv_bfloat16*>(q);
  const auto* kd = static_cast<const __nv_bfloat16*>(k);
  const auto* vd = static_cast<const __nv_bfloat16*>(v);
  const auto s = static_cast<cudaStream_t>(stream);
  with_elem(out_type, [&](auto out_elem) {
    using Out = decltype(out_elem);
    Out* o = static_cast<Out*>(out);
    if (g.dim == 64) return launch_for_dim<64>(o, lse, qd, kd, vd, m, g, s);
    if (g.dim == 128) return launch_for_dim<128>(o, lse, qd, kd, vd, m, g, s);
    cuda_error(("cuda flash attention: head_dim " + std::to_string(g.dim) +
                " is not supported (64 or 128)")
                   .c_str());
  });
}

}  // namespace maxctx::kernels::cuda::flash

// The VNNI tile: T tokens × NB blocks of 16 output rows, T·NB zmm accumulators held in
// registers over the whole input dimension; per quad of input columns NB weight vectors are
// loaded once and meet T broadcast token quads. Weights are read once per T tokens, so decode
// (T = 1) streams them at memory speed and prefill reuses each loaded vector T = 4 times. Tokens
// are processed in chunks so that one group of weight blocks stays in L1/L2 across a chunk.
#include "maxctx/kernels/cpu/int8.h"

#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "maxctx/core/check.h"
#include "maxctx/kernels/cpu/elementwise.h"
#include "maxctx/kernels/cpu/quantize_row.h"
#include "maxctx/kernels/cpu/threading.h"

namespace maxctx::kernels::cpu {
namespace {

constexpr int kTileTokens = 4;
constexpr int kTileBlocks = 4;
constexpr int64_t kTokenChunk = 128;
constexpr int kOffset = 128;  // unsigned activation = code + 128

// Writes out rows [t0, t0 + T) × output rows of blocks [b0, b0 + NB) from the int32 sums.
void store_tile(float* out, const int32_t* acc, int T, int NB, int64_t t0, int64_t b0,
                const Int8Rows& in, const Int8Weights& w) {
  for (int t = 0; t < T; ++t) {
    const float x_scale = in.scale[t0 + t];
    float* row = out + (t0 + t) * w.out_dim;
    for (int b = 0; b < NB; ++b) {
      const int64_t o0 = (b0 + b) * kInt8BlockRows;
      const int64_t o_end = std::min(w.out_dim, o0 + kInt8BlockRows);
      for (int64_t o = o0; o < o_end; ++o) {
        const int32_t sum = acc[(t * NB + b) * kInt8BlockRows + (o - o0)] - kOffset * w.row_sum[o];
        row[o] = float(sum) * (x_scale * w.scale[o]);
      }
    }
  }
}

template <int T, int NB>
__attribute__((target("avx512f,avx512bw,avx512vnni"))) void vnni_tile(float* out,
                                                                      const Int8Rows& in,
                                                                      const Int8Weights& w,
                                                                      int64_t t0, int64_t b0) {
  const int64_t x_stride = in.quads * 4;
  const int64_t block_bytes = w.quads * 64;
  const uint8_t* x = in.codes.data() + t0 * x_stride;
  const int8_t* wb = reinterpret_cast<const int8_t*>(w.packed.data()) + b0 * block_bytes;
  __m512i acc[T][NB];
  for (int t = 0; t < T; ++t)
    for (int b = 0; b < NB; ++b) acc[t][b] = _mm512_setzero_si512();
  for (int64_t q = 0; q < w.quads; ++q) {
    __m512i wv[NB];
    for (int b = 0; b < NB; ++b) wv[b] = _mm512_load_si512(wb + b * block_bytes + q * 64);
    for (int t = 0; t < T; ++t) {
      int32_t quad;
      std::memcpy(&quad, x + t * x_stride + q * 4, sizeof(quad));
      const __m512i xv = _mm512_set1_epi32(quad);
      for (int b = 0; b < NB; ++b) acc[t][b] = _mm512_dpbusd_epi32(acc[t][b], xv, wv[b]);
    }
  }
  alignas(64) int32_t sums[T * NB * kInt8BlockRows];
  for (int t = 0; t < T; ++t)
    for (int b = 0; b < NB; ++b)
      _mm512_store_si512(sums + (t * NB + b) * kInt8BlockRows, acc[t][b]);
  store_tile(out, sums, T, NB, t0, b0, in, w);
}

void portable_tile(float* out, const Int8Rows& in, const Int8Weights& w, int64_t t0, int64_t b0,
                   int T, int NB) {
  const int64_t x_stride = in.quads * 4;
  const int64_t block_bytes = w.quads * 64;
  const int8_t* packed = reinterpret_cast<const int8_t*>(w.packed.data());
  int32_t sums[kTileTokens * kTileBlocks * kInt8BlockRows] = {};
  for (int t = 0; t < T; ++t) {
    const uint8_t* x = in.codes.data() + (t0 + t) * x_stride;
    for (int b = 0; b < NB; ++b) {
      const int8_t* wb = packed + (b0 + b) * block_bytes;
      int32_t* s = sums + (t * NB + b) * kInt8BlockRows;
      for (int64_t q = 0; q < w.quads; ++q) {
        for (int r = 0; r < kInt8BlockRows; ++r) {
          for (int j = 0; j < 4; ++j) {
            s[r] += int32_t{x[q * 4 + j]} * int32_t{wb[q * 64 + r * 4 + j]};
          }
        }
      }
    }
  }
  store_tile(out, sums, T, NB, t0, b0, in, w);
}

using TileFn = void (*)(float*, const Int8Rows&, const Int8Weights&, int64_t, int64_t);

template <int T>
TileFn vnni_tile_for_blocks(int NB) {
  switch (NB) {
    case 1:
      return &vnni_tile<T, 1>;
    case 2:
      return &vnni_tile<T, 2>;
    case 3:
      return &vnni_tile<T, 3>;
    default:
      return &vnni_tile<T, 4>;
  }
}

TileFn vnni_tile_for(int T, int NB) {
  switch (T) {
    case 1:
      return vnni_tile_for_blocks<1>(NB);
    case 2:
      return vnni_tile_for_blocks<2>(NB);
    case 3:
      return vnni_tile_for_blocks<3>(NB);
    default:
      return vnni_tile_for_blocks<4>(NB);
  }
}

}  // namespace

bool int8_vnni_available() {
  static const bool available =
      __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vnni");
  return available;
}

Int8Weights int8_pack_weights(const float* w, int64_t out_dim, int64_t in_dim) {
  MAXCTX_CHECK(out_dim > 0 && in_dim > 0, "int8 weights need positive dims, got ({}, {})", out_dim,
               in_dim);
  std::vector<int8_t> codes(static_cast<size_t>(out_dim * in_dim));
  std::vector<float> scale(static_cast<size_t>(out_dim));
  for (int64_t o = 0; o < out_dim; ++o) {
    scale[o] = quantize_row_signed(codes.data() + o * in_dim, w + o * in_dim, in_dim, kInt8Levels);
  }
  return int8_pack_codes(codes.data(), scale.data(), out_dim, in_dim);
}

Int8Weights int8_pack_codes(const int8_t* codes, const float* scale, int64_t out_dim,
                            int64_t in_dim) {
  MAXCTX_CHECK(out_dim > 0 && in_dim > 0, "int8 weights need positive dims, got ({}, {})", out_dim,
               in_dim);
  Int8Weights p;
  p.out_dim = out_dim;
  p.in_dim = in_dim;
  p.quads = (in_dim + 3) / 4;
  p.blocks = (out_dim + kInt8BlockRows - 1) / kInt8BlockRows;
  p.packed = AlignedBuffer(static_cast<size_t>(p.blocks * p.quads * 64));
  p.scale.assign(scale, scale + out_dim);
  p.row_sum.resize(static_cast<size_t>(out_dim));
  int8_t* packed = reinterpret_cast<int8_t*>(p.packed.data());
  for (int64_t o = 0; o < out_dim; ++o) {
    const int8_t* row = codes + o * in_dim;
    int32_t sum = 0;
    const int64_t block = o / kInt8BlockRows, r = o % kInt8BlockRows;
    for (int64_t i = 0; i < in_dim; ++i) {
      sum += row[i];
      packed[(block * p.quads + i / 4) * 64 + r * 4 + i % 4] = row[i];
    }
    p.row_sum[o] = sum;
  }
  return p;
}

void int8_quantize_rows(Int8Rows& out, const float* in, int64_t N, int64_t in_dim) {
  out.rows = N;
  out.quads = (in_dim + 3) / 4;
  const int64_t width = out.quads * 4;
  out.codes.resize(static_cast<size_t>(N * width));
  out.scale.resize(static_cast<size_t>(N));
  parallel_for(N, items_per_task(in_dim), [&](int64_t begin, int64_t end) {
    for (int64_t n = begin; n < end; ++n) {
      uint8_t* u = out.codes.data() + n * width;
      // The reference's rule (ref::quantize_row_int8), codes + kOffset.
      out.scale[n] = quantize_row_offset(u, in + n * in_dim, in_dim, kInt8Levels);
      std::fill(u + in_dim, u + width, static_cast<uint8_t>(kOffset));
    }
  });
}

void int8_matmul_forward(float* out, const Int8Rows& in, const Int8Weights& w, Int8Path path) {
  MAXCTX_CHECK_EQ(in.quads, w.quads, "int8 activations and weights disagree on in_dim");
  const bool vnni = path == Int8Path::kBest && int8_vnni_available();
  const int64_t groups = (w.blocks + kTileBlocks - 1) / kTileBlocks;
  for (int64_t c0 = 0; c0 < in.rows; c0 += kTokenChunk) {
    const int64_t c1 = std::min(in.rows, c0 + kTokenChunk);
    parallel_for(groups, 1, [&](int64_t g_begin, int64_t g_end) {
      for (int64_t g = g_begin; g < g_end; ++g) {
        const int64_t b0 = g * kTileBlocks;
        const int NB = static_cast<int>(std::min<int64_t>(kTileBlocks, w.blocks - b0));
        for (int64_t t0 = c0; t0 < c1; t0 += kTileTokens) {
          const int T = static_cast<int>(std::min<int64_t>(kTileTokens, c1 - t0));
          if (vnni) {
            vnni_tile_for(T, NB)(out, in, w, t0, b0);
          } else {
            portable_tile(out, in, w, t0, b0, T, NB);
          }
        }
      }
    });
  }
}

void quantize_rows_int8(int8_t* q, float* scale, FloatPtr x, int64_t rows, int64_t cols,
                        float levels) {
  parallel_for(rows, items_per_task(cols), [&](int64_t begin, int64_t end) {
    thread_local std::vector<float> widened;  // a bf16 row as the rule's f32 input (exact)
    if (x.is_bf16() && widened.size() < size_t(cols)) widened.resize(size_t(cols));
    for (int64_t r = begin; r < end; ++r) {
      const float* row = static_cast<const float*>(x.raw()) + r * cols;
      if (x.is_bf16()) {
        convert_serial(widened.data(), x + r * cols, cols);
        row = widened.data();
      }
      scale[r] = quantize_row_signed(q + r * cols, row, cols, levels);
    }
  });
}

void dequantize_rows_int8(FloatPtr x, const int8_t* q, const float* scale, int64_t rows,
                          int64_t cols) {
  parallel_for(rows, items_per_task(cols), [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const float s = scale[r];
      const int8_t* qr = q + r * cols;
      if (x.is_bf16()) {
        bf16* xr = static_cast<bf16*>(x.raw()) + r * cols;
        for (int64_t i = 0; i < cols; ++i) xr[i] = float_to_bf16(float(qr[i]) * s);
      } else {
        float* xr = static_cast<float*>(x.raw()) + r * cols;
        for (int64_t i = 0; i < cols; ++i) xr[i] = float(qr[i]) * s;
      }
    }
  });
}

}  // namespace maxctx::kernels::cpu

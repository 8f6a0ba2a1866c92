// Fast int8 kernels: the KV-cache row quantizer and the int8 matmul (AVX-512 VNNI).
//
// Same rule and same bits as kernels/ref/int8.h, which defines it: codes are exact integers and
// the int32 sums are exact, so the cpu matmul equals ref::int8_matmul_forward bit for bit
// whatever the blocking or thread count.
//
// The matmul works on weights quantized once per output channel and packed for vpdpbusd, which
// multiplies unsigned by signed bytes: activations are stored offset by +128 (u = q + 128, in
// 1..255) and Σ u·w = Σ q·w + 128·Σ w, so each output subtracts 128·row_sum. Packed layout:
// blocks of 16 output rows, and in a block one 64-byte vector per quad of input columns (row r's
// four bytes at r·4), so a broadcast quad of one token times one vector updates 16 outputs with
// no horizontal sums. The VNNI code is compiled for that target with a function attribute (the
// baseline is AVX2) and chosen at run time; without VNNI a portable loop computes the same bits.
#pragma once

#include <cstdint>
#include <vector>

#include "maxctx/core/buffer.h"
#include "maxctx/kernels/cpu/float_ptr.h"
#include "maxctx/kernels/types.h"

namespace maxctx::kernels::cpu {

using kernels::Int8Rows;
using kernels::Int8Weights;

// Quantizes and packs `w` (out_dim, in_dim) float, as ref::quantize_rows_int8 with levels 127.
Int8Weights int8_pack_weights(const float* w, int64_t out_dim, int64_t in_dim);
// Packs codes already quantized (codes (out_dim, in_dim), w ≈ codes · scale per row): what
// int8_pack_weights gives for the weights those codes came from (a quantized checkpoint).
Int8Weights int8_pack_codes(const int8_t* codes, const float* scale, int64_t out_dim,
                            int64_t in_dim);

// Resizes `out` (keeping its capacity) and fills it from in (N, in_dim).
void int8_quantize_rows(Int8Rows& out, const float* in, int64_t N, int64_t in_dim);

enum class Int8Path {
  kBest,      // VNNI when the CPU has it, else portable
  kPortable,  // plain loops over the packed layout (tests compare the two)
};

bool int8_vnni_available();

// out (in.rows, w.out_dim) = dequantized Σ_k q_in[n, k] · q_w[o, k]; in.quads must equal w.quads.
void int8_matmul_forward(float* out, const Int8Rows& in, const Int8Weights& w,
                         Int8Path path = Int8Path::kBest);

// The KV-cache rule (levels 127.5) over rows, threaded over rows; same bits as the reference.
// x may be f32 or bf16: a bf16 row is quantized from its exact f32 widening, and dequantized
// values are rounded once into it.
void quantize_rows_int8(int8_t* q,     // (rows, cols)
                        float* scale,  // (rows)
                        FloatPtr x,    // (rows, cols)
                        int64_t rows, int64_t cols, float levels);
void dequantize_rows_int8(FloatPtr x,          // (rows, cols)
                          const int8_t* q,     // (rows, cols)
                          const float* scale,  // (rows)
                          int64_t rows, int64_t cols);

}  // namespace maxctx::kernels::cpu

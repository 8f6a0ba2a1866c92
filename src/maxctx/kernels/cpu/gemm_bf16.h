// GEMM with bf16 products and fp32 accumulation: C = alpha · op(A) · op(B) + beta · C, row-major,
// the bf16 sibling of sgemm.h (same Goto/BLIS shape, same transposes, same alpha/beta rules).
//
// A and B may each hold f32 or bf16; every element is rounded to bf16 (float_to_bf16: round to
// nearest even; a bf16 subnormal becomes a signed zero, as AMX reads it) while it is packed into
// pair-interleaved panels. The rounding sequence is AMX's TDPBF16PS (found by experiment on
// Sapphire Rapids, bit for bit on cancellation, 2^±127 magnitudes, subnormals and signed zeros;
// Intel's pseudocode, which adds the pair's products to the accumulator one by one, is not what
// the hardware does). K runs in blocks of kGemmBf16BlockK; a block runs in chunks of 32 elements
// (16 pairs), zero-padded at the block's end. For each element of C, acc = +0 per block, and per
// chunk, with every operation an fp32 add rounded to nearest even whose subnormal result is
// flushed to a signed zero (FTZ), each bf16 × bf16 product exact:
//   even = +0; odd = +0;
//   for q in chunk: even = fma(a[2q], b[2q], even); odd = fma(a[2q + 1], b[2q + 1], odd)
//   acc = acc + (even + odd)
// A block's sum is stored as sgemm stores it (alpha · acc, or fma(acc, alpha, beta · c)). Threads
// split C, never K, so the bits depend neither on the thread count nor on the CPU: one without
// AMX runs the same sequence in vector FMAs where no intermediate can be subnormal (the operands'
// exponents show it: gemm_bf16_tile.h), else in portable scalar code (about 50× slower than AMX;
// vdpbf16ps cannot replay it); both tested bit for bit against AMX and each other. C is f32, or
// bf16 rounded once from the fp32 result (beta then reads the bf16 C widened).
//
// Ours or oneDNN's (bench/kernels, bf16_gemm section, one pinned Sapphire Rapids core, the
// maxctx-20m/100m training products at S = 2048): this kernel on AMX runs 3.1× the fp32 sgemm
// over all products (1.1-3.7× each), 0.83× oneDNN 2.6.3 (which also uses AMX, with K splits and
// kernels chosen by ISA and thread count, so its bits depend on both); both reach only 0.14-0.17
// of the AMX tile peak (~3.3 TFLOP/s with operands in tile registers): tile loads, packing and
// the fp32 stores bound them at these sizes.
#pragma once

#include <cstdint>

#include "maxctx/core/dtype.h"
#include "maxctx/kernels/cpu/sgemm.h"

namespace maxctx::kernels::cpu {

// K block of the bf16 GEMM (a multiple of 2): part of its rounding sequence, so fixed.
inline constexpr int64_t kGemmBf16BlockK = 512;

// Arrays of either float dtype (f32 or bf16), for the mixed-precision entry points.
struct ConstFloats {
  const void* data;
  DType dtype;
};
struct Floats {
  void* data;
  DType dtype;
};

// As sgemm, with the rounding described above. a, b, c: f32 or bf16 each.
void gemm_bf16(Transpose trans_a, Transpose trans_b, int64_t m, int64_t n, int64_t k, float alpha,
               ConstFloats a, int64_t lda, ConstFloats b, int64_t ldb, float beta, Floats c,
               int64_t ldc);

enum class Bf16Path {
  kBest,      // AMX (tdpbf16ps) when the CPU has AMX-BF16 and Linux allows it, else kVector
  kPortable,  // the portable loops everywhere (tests compare the paths)
  kVector,    // never AMX: the vector tile where the operands allow it, else the portable loops
};
// The path gemm_bf16 takes from now on, for every thread (tests only; not thread-safe to change
// while a product runs).
void set_gemm_bf16_path(Bf16Path path);
bool gemm_bf16_amx_available();
// "amx_bf16", "vector_exact_<Highway target>" or "portable": what gemm_bf16 runs now.
const char* gemm_bf16_kernel_name();
// How many times (A block × B micro-panel) the vector path has run the portable loops because an
// intermediate could be subnormal, since the program started (tests).
int64_t gemm_bf16_portable_fallbacks();

}  // namespace maxctx::kernels::cpu

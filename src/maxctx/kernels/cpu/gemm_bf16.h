// GEMM with bf16 products and fp32 accumulation: C = alpha · op(A) · op(B) + beta · C, row-major,
// the bf16 sibling of sgemm.h (same Goto/BLIS shape, same transposes, same alpha/beta rules).
//
// A and B may each hold f32 or bf16; every element is rounded to bf16 (float_to_bf16: round to
// nearest even; a bf16 subnormal becomes a signed zero, as vdpbf16ps reads it) while it is packed
// into pair-interleaved panels, since AVX512_BF16's vdpbf16ps multiplies pairs along K. For each
// element of C and each pair (k0, k0 + 1) the accumulator takes, in this order,
//   acc = fma(a[k0 + 1], b[k0 + 1], acc); acc = fma(a[k0], b[k0], acc)
// (Intel's pseudocode: each bf16 × bf16 product is exact in fp32, each add rounds to nearest even,
// and a subnormal sum is flushed to zero). K runs in blocks of kGemmBf16BlockK; a block's sum is
// stored as sgemm stores it (alpha · acc, or fma(acc, alpha, beta · c)). Threads split C, never
// K, so the bits depend neither on the thread count nor on the CPU: one without AVX512_BF16 runs
// the same sequence in portable code (about 10× slower), tested bit for bit against the fast
// path. C is f32, or bf16 rounded once from the fp32 result (beta then reads the bf16 C widened).
//
// Ours or oneDNN's (bench/kernels, bf16_gemm section, one pinned Sapphire Rapids core, the
// maxctx-20m/100m training products at S = 2048): on vdpbf16ps this kernel reaches 0.87-0.88 of
// the measured vdpbf16ps peak, oneDNN 2.6.3 limited to the same ISA (ONEDNN_MAX_CPU_ISA=
// AVX512_CORE_BF16) 0.93, so about 5% apart; but that peak is half the fp32 FMA rate on this core
// (vdpbf16ps issues every other cycle), so bf16 products run at 0.67× the fp32 sgemm. oneDNN by
// default uses AMX (tdpbf16ps) and is about 6× faster than this kernel. We keep ours because it
// is the contract's numerics (AMX's accumulation order is not vdpbf16ps's, and oneDNN chooses
// kernels and K splits by ISA and thread count, so its bits would depend on both) and adds no
// dependency; an AMX micro-tile with its rounding sequence documented is the next step.
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
  kBest,      // AMX (tdpbf16ps) when the CPU has AMX-BF16 and Linux allows it, else portable
  kPortable,  // the portable loops (tests compare the two)
};
// The path gemm_bf16 takes from now on, for every thread (tests only; not thread-safe to change
// while a product runs).
void set_gemm_bf16_path(Bf16Path path);
bool gemm_bf16_amx_available();
// "amx_bf16" or "portable": what gemm_bf16 runs now.
const char* gemm_bf16_kernel_name();

}  // namespace maxctx::kernels::cpu

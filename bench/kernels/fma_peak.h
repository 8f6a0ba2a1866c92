// FMA throughput probes for kernels_bench: kFmaChains independent multiply-add chains on the
// widest vectors Highway dispatches to on this CPU (AVX-512 where the core has it, although the
// project's baseline code is AVX2).
#pragma once

#include <cstdint>

namespace maxctx::bench {

inline constexpr int kFmaChains = 12;

// Runs `iterations` steps of every chain; returns a checksum so the work cannot be elided.
float run_fma_chains(int64_t iterations);
// Floats per vector of the dispatched target, and its Highway name.
int64_t fma_vector_lanes();
const char* fma_target_name();

// The same for vdpbf16ps (AVX512_BF16), 64 flops per instruction (16 lanes × a pair of
// multiply-adds): the peak of the bf16 GEMM. Call only where dpbf16_available().
bool dpbf16_available();
float run_dpbf16_chains(int64_t iterations);
// AMX: `iterations` steps of 4 tdpbf16ps on 16 × 16 fp32 tiles, 16384 flops each step (16 × 16 ×
// 32 multiply-adds per tile). Call only where cpu::gemm_bf16_amx_available() (which also asks
// Linux for the tile state).
float run_amx_tiles(int64_t iterations);

}  // namespace maxctx::bench

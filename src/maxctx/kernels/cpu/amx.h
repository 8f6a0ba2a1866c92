// AMX, as the bf16 GEMM (gemm_bf16.cpp) and the bf16 attention tiles (attention_tiles.cpp) use
// it: one check that the process may run tile instructions, and one tile layout.
#pragma once

namespace maxctx::kernels::cpu {

// The CPU has AMX-TILE and AMX-BF16 (CPUID 7.0 EDX bits 24 and 22) and Linux lets this process
// use the tile data (arch_prctl ARCH_REQ_XCOMP_PERM for XFEATURE_XTILEDATA). Asked once per
// process, thread-safe; every thread may then load tiles.
bool amx_bf16_usable();

// The layout both kernels use: tiles 0-7 of 16 rows × 64 bytes (C 0-3 as 2 × 2 tiles of 16 × 16
// fp32, A 4-5, B 6-7). Per thread, before its first tile instruction; release when done.
void amx_load_tile_config();
void amx_release_tiles();

}  // namespace maxctx::kernels::cpu

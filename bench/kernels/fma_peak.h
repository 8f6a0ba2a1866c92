// FMA throughput probe for kernels_bench: kFmaChains independent multiply-add chains on the
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

}  // namespace maxctx::bench

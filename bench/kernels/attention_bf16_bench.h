// bf16 attention cases of kernels_bench (kept apart from kernels_bench.cpp): the flash kernel's
// forward and backward with q, k, v in bf16 against fp32 in the same run, and decode attention
// on a bf16 KV cache against an fp32 one.
#pragma once

#include "nlohmann/json.hpp"

namespace maxctx::bench {

// Causal attention at S = 8192 with maxctx-20m's heads (Hq 8, Hkv 2, D 64), fp32 and bf16:
// seconds, GFLOP/s of useful work, the bf16/fp32 speedup, fractions of fma_peak_gflops (fp32)
// and of the measured bf16 peak of the instruction that ran (fma_peak.h's probes: AMX's
// tdpbf16ps, or vdpbf16ps; 0 where absent).
nlohmann::json attention_bf16(double fma_peak_gflops, double dpbf16_peak_gflops,
                              double amx_peak_gflops);
// single_query_attention over fp32 and bf16 caches (maxctx-20m heads, 32K and 128K rows).
nlohmann::json decode_attention_bf16();

}  // namespace maxctx::bench

// The largest model and run sizes maxctx accepts, far above any real Llama (Llama 3.1 405B:
// width 16384, MLP 53248, 126 layers, 128 heads, vocabulary 128256) and low enough that every
// product of two of them fits an int64_t with room to spare, so sizes derived from them
// (q_dim, a layer's weight count, tokens per batch) cannot overflow. The memory check
// (core/memory_check.h) then decides whether a run within these bounds fits the machine.
// Token ids, positions and window spans are int32 in the kernels: those keys stop at 2^31 - 1.
#pragma once

#include <cstdint>
#include <limits>

namespace maxctx::limits {

inline constexpr int64_t kMaxWidth = int64_t{1} << 24;    // emb_dim, mlp_dim
inline constexpr int64_t kMaxHeads = int64_t{1} << 16;    // query and kv heads
inline constexpr int64_t kMaxHeadDim = int64_t{1} << 16;  // head_dim
inline constexpr int64_t kMaxLayers = int64_t{1} << 16;   // decoder layers
inline constexpr int64_t kMaxExperts = int64_t{1} << 16;  // experts (Mixtral 8, DeepSeek-V3 256)
inline constexpr int64_t kMaxInt32 = std::numeric_limits<int32_t>::max();
inline constexpr int64_t kMaxVocab = kMaxInt32;               // token ids are int32
inline constexpr int64_t kMaxSequence = kMaxInt32;            // positions are int32
inline constexpr int64_t kMaxGlobalBatch = int64_t{1} << 24;  // sequences per step

}  // namespace maxctx::limits

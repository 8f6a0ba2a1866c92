// The parameter, statistics and packed-weight types of the op table (kernels/kernels.h).
//
// These are what code above kernels/ passes to and gets back from the kernels: attention
// dimensions and mask parameters, tile statistics, RoPE frequencies, the int8 rule's constants
// and the int8 weight and activation formats. They belong to no backend; the reference (ref/),
// the cpu backend (cpu/) and later ones include them from here, and production code never
// includes ref/ or cpu/ to reach them.
#pragma once

#include <cstdint>
#include <vector>

#include "maxctx/core/buffer.h"

namespace maxctx::kernels {

// ---- attention (layout and mask semantics: kernels/ref/attention.h) ----

struct AttentionParams {
  int64_t batch = 1;           // B
  int64_t seq_q = 0;           // Sq: query rows per batch element
  int64_t seq_k = 0;           // Sk: key/value rows per batch element (may be one chunk of them)
  int64_t heads_q = 0;         // Hq
  int64_t heads_kv = 0;        // Hkv; Hq % Hkv == 0 (MHA: Hkv == Hq, MQA: Hkv == 1)
  int64_t head_dim = 0;        // D
  double scale = 0.0;          // multiplies q·k; 0 selects the usual 1/sqrt(D)
  int32_t sliding_window = 0;  // > 0: key j is also masked when q_pos - k_pos >= sliding_window

  double softmax_scale() const;
  int64_t group_size() const { return heads_q / heads_kv; }  // query heads per kv head
};

// Work counted in (query block, key block) tiles per batch element and kv head. A tile is
// skipped when it is provably fully masked; the cpu kernel's tiles are its block sizes, the
// reference's tiles are single (query row, key row) pairs. Counts add up over calls.
// Device-to-host traffic a device backend has counted (Kernels::transfer_counts).
struct TransferCounts {
  int64_t readbacks = 0;  // copies to the host: copy_to_host and copy_to_host_async
  int64_t host_waits =
      0;                 // calls that wait for the device: synchronize, a synchronous copy_to_host
  int64_t offloads = 0;  // copies to the host for the backward (offload_to_host_async)
  TransferCounts operator-(const TransferCounts& since) const {
    return {readbacks - since.readbacks, host_waits - since.host_waits, offloads - since.offloads};
  }
  TransferCounts& operator+=(const TransferCounts& more) {
    readbacks += more.readbacks;
    host_waits += more.host_waits;
    offloads += more.offloads;
    return *this;
  }
};

struct AttentionStats {
  int64_t blocks_computed = 0;
  int64_t blocks_skipped = 0;
};

// Aborts (MAXCTX_CHECK) unless the dims are positive (Sq, Sk may be 0), Hq % Hkv == 0, the
// window is >= 0 and the scale is finite.
void check_attention_params(const AttentionParams& params);

// The mask, in one place. Differences are taken in 64 bits so extreme positions cannot wrap.
inline bool attention_visible(int32_t q_pos, int32_t q_seg, int32_t k_pos, int32_t k_seg,
                              int32_t sliding_window) {
  const int64_t distance = static_cast<int64_t>(q_pos) - k_pos;
  return q_seg == k_seg && distance >= 0 && (sliding_window <= 0 || distance < sliding_window);
}

// ---- rotary position embedding (formula: kernels/ref/rope.h) ----

enum class RopeScaling {
  kNone,    // plain RoPE
  kLlama3,  // Hugging Face rope_type "llama3" (Llama 3.1+ long-context frequency scaling)
};

struct RopeParams {
  double theta = 10000.0;  // rope_theta; Llama 3 uses 500000
  RopeScaling scaling = RopeScaling::kNone;
  // Only read when scaling == kLlama3; the defaults are Llama 3.1's.
  double factor = 8.0;
  double low_freq_factor = 1.0;
  double high_freq_factor = 4.0;
  double original_max_position_embeddings = 8192.0;
};

// inv_freq[i] = theta^(-2i/head_dim) for i < head_dim/2, then, for kLlama3: wavelengths
// 2π/inv_freq shorter than original_max/high_freq_factor are kept, longer than
// original_max/low_freq_factor are divided by factor, and the band between is interpolated
// with s = (original_max/wavelength − low) / (high − low): (1 − s)·inv/factor + s·inv.
std::vector<double> rope_inv_freq(const RopeParams& params, int64_t head_dim);

// ---- int8 (the rule: kernels/ref/int8.h) ----

inline constexpr float kInt8Levels = 127.0f;    // weights and activations
inline constexpr float kInt8KvLevels = 127.5f;  // the KV cache (MaxText)

inline constexpr int64_t kInt8BlockRows = 16;  // output rows per packed block (one zmm of int32)

// A (out_dim, in_dim) weight matrix, quantized per output row (levels 127) and packed.
struct Int8Weights {
  int64_t out_dim = 0;
  int64_t in_dim = 0;
  int64_t quads = 0;             // ceil(in_dim / 4)
  int64_t blocks = 0;            // ceil(out_dim / 16)
  AlignedBuffer packed;          // (blocks, quads, 16, 4) int8; padding rows and columns are 0
                                 // (a device backend's own layout in its memory: cuda/int8.h)
  std::vector<float> scale;      // (out_dim) w ≈ q · scale
  std::vector<int32_t> row_sum;  // (out_dim) Σ_k q[o, k]
};

// Rows of activations quantized per row (levels 127) for int8_matmul_forward.
struct Int8Rows {
  int64_t rows = 0;
  int64_t quads = 0;
  std::vector<uint8_t> codes;  // (rows, quads·4) q + 128; padding columns hold 128 (q = 0)
  std::vector<float> scale;    // (rows)
  // A device backend's rows in its own memory and layout (kernels/cuda/int8.h); the host
  // vectors above are then empty.
  AlignedBuffer device;
};

}  // namespace maxctx::kernels

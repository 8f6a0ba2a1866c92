// This rank's shard of the KV cache: per layer K and V of the KV heads only, preallocated.
//
// Layout per slot: a prefill region (the prompt's rows this rank keeps after a sharded prefill)
// followed by a decode region (generated tokens this rank owns). A row carries its token's
// position and a segment id, 1 for a token and 0 for an empty or padding row, so attention
// masks come from the rows themselves: a decode query (segment 1, position p) sees exactly the
// filled rows with position <= p, wherever the sharding put them. Rows are never compacted or
// reordered.
//
// int8 (quantize_kvcache): one scale per token over heads × head_dim, the KV rule of
// kernels/ref/int8.h (q = rint(x·127.5/max|x|) clamped to [−127, 127], scale = max|x|/127.5).
// Otherwise rows are stored in `dtype` (f32, or bf16: half the bytes a decode step streams).
// Attention reads the cache in place, rows or int8 codes and scales (the decode kernel
// dequantizes an int8 block of rows in L1 as it uses it).
#pragma once

#include <cstdint>
#include <vector>

#include "maxctx/core/tensor.h"
#include "maxctx/kernels/host_transfer.h"
#include "maxctx/kernels/kernels.h"

namespace maxctx::parallel {

struct KvCacheShape {
  int64_t layers = 0;
  int64_t slots = 0;          // decode slots held by this rank
  int64_t heads_kv = 0;       // Hkv
  int64_t head_dim = 0;       // D
  int64_t prefill_rows = 0;   // per slot: this rank's share of the longest prompt
  int64_t decode_rows = 0;    // per slot: generated tokens this rank may own
  bool int8 = false;          // int8 codes with a scale per row, else rows in `dtype`
  DType dtype = DType::kF32;  // f32 or bf16, when not int8

  int64_t rows() const { return prefill_rows + decode_rows; }
  int64_t row_elements() const { return heads_kv * head_dim; }
};

// K and V of one layer as attention reads them: (slots, rows, Hkv, D) with positions and
// segment ids (slots, rows); for an int8 cache k and v are codes with one scale per row
// (k_scale, v_scale (slots, rows); empty otherwise). `rows` may be less than the cache's (one
// slot: only the rows in use).
struct KvView {
  int64_t rows = 0;
  TensorView k, v;
  TensorView k_scale, v_scale;
  bool quantized() const { return !k_scale.empty(); }
  const int32_t* positions = nullptr;
  const int32_t* segments = nullptr;
};

class KvCache {
 public:
  // Allocated through `kernels`, the backend attention reads it with.
  KvCache(const kernels::Kernels& kernels, const KvCacheShape& shape);

  const KvCacheShape& shape() const { return shape_; }

  // Marks every row empty and forgets the decode rows (the K/V bytes are left as they are).
  void reset();

  // Metadata of rows [row, row + n) of `slot`, the same for every layer.
  void set_rows(int64_t slot, int64_t row, int64_t n, const int32_t* positions,
                const int32_t* segments);
  // Reserves the next decode row of `slot` for a token at `position`; returns its row.
  int64_t append_decode_row(int64_t slot, int32_t position);
  int64_t decode_length(int64_t slot) const { return decode_length_[slot]; }
  // Rows in use: the prefill region and the longest decode region of any slot.
  int64_t rows_in_use() const;

  // k, v (n·Hkv·D elements, any float dtype) into rows [row, row + n) of `slot` in `layer`.
  void store(int64_t layer, int64_t slot, int64_t row, int64_t n, TensorView k, TensorView v);

  // The layer's K/V for attention, in place.
  KvView view(int64_t layer) const;

  int64_t bytes() const;  // everything allocated: K, V, scales, positions, segments
  // bytes() of a cache of this shape, before building one (`maxctx plan`).
  static int64_t bytes_for(const KvCacheShape& shape);
  // Bytes attention reads from this cache per step: rows in use of every slot and layer.
  int64_t bytes_in_use() const;

 private:
  int64_t offset(int64_t layer, int64_t slot, int64_t row) const {
    return ((layer * shape_.slots + slot) * shape_.rows() + row) * shape_.row_elements();
  }

  const kernels::Kernels& kernels_;
  KvCacheShape shape_;
  Tensor k_, v_;                    // (L, slots, rows, Hkv, D) f32, bf16 or int8
  Tensor k_scale_, v_scale_;        // (L, slots, rows) int8 only
  std::vector<int32_t> positions_;  // (slots, rows)
  std::vector<int32_t> segments_;   // (slots, rows) 1 = a token, 0 = empty
  // The two id tables in the backend's memory, which attention reads; the elements
  // [dirty_begin_, dirty_end_) changed on the host since the last view() and are copied then
  // (one copy each per decode step, not one per row).
  mutable kernels::DeviceIndices positions_device_, segments_device_;
  mutable int64_t dirty_begin_ = 0, dirty_end_ = 0;
  std::vector<int64_t> decode_length_;  // (slots) decode rows used
};

}  // namespace maxctx::parallel

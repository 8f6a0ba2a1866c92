#include "maxctx/parallel/kv_cache.h"

#include <algorithm>

#include "maxctx/core/check.h"

namespace maxctx::parallel {

KvCache::KvCache(const kernels::Kernels& kernels, const KvCacheShape& s)
    : kernels_(kernels), shape_(s) {
  MAXCTX_CHECK(s.layers > 0 && s.slots > 0 && s.heads_kv > 0 && s.head_dim > 0 && s.rows() > 0,
               "KV cache shape (L={}, slots={}, Hkv={}, D={}, rows={}) must be positive", s.layers,
               s.slots, s.heads_kv, s.head_dim, s.rows());
  const DType dtype = s.int8 ? DType::kI8 : s.dtype;
  const Shape kv_shape{s.layers, s.slots, s.rows(), s.heads_kv, s.head_dim};
  k_ = kernels.empty(kv_shape, dtype);
  v_ = kernels.empty(kv_shape, dtype);
  if (s.int8) {
    k_scale_ = kernels.empty({s.layers, s.slots, s.rows()});
    v_scale_ = kernels.empty({s.layers, s.slots, s.rows()});
  }
  positions_.assign(static_cast<size_t>(s.slots * s.rows()), 0);
  segments_.assign(static_cast<size_t>(s.slots * s.rows()), 0);
  positions_device_.upload(kernels, positions_);
  segments_device_.upload(kernels, segments_);
  decode_length_.assign(static_cast<size_t>(s.slots), 0);
}

void KvCache::reset() {
  std::fill(positions_.begin(), positions_.end(), 0);
  std::fill(segments_.begin(), segments_.end(), 0);
  dirty_begin_ = 0;
  dirty_end_ = static_cast<int64_t>(positions_.size());
  std::fill(decode_length_.begin(), decode_length_.end(), 0);
}

void KvCache::set_rows(int64_t slot, int64_t row, int64_t n, const int32_t* positions,
                       const int32_t* segments) {
  MAXCTX_CHECK(slot >= 0 && slot < shape_.slots && row >= 0 && row + n <= shape_.rows(),
               "rows [{}, {}) of slot {} outside the cache's {} slots x {} rows", row, row + n,
               slot, shape_.slots, shape_.rows());
  const int64_t at = slot * shape_.rows() + row;
  std::copy(positions, positions + n, positions_.begin() + at);
  std::copy(segments, segments + n, segments_.begin() + at);
  dirty_begin_ = dirty_end_ > dirty_begin_ ? std::min(dirty_begin_, at) : at;
  dirty_end_ = std::max(dirty_end_, at + n);
}

int64_t KvCache::append_decode_row(int64_t slot, int32_t position) {
  MAXCTX_CHECK(decode_length_[slot] < shape_.decode_rows,
               "slot {} has used all {} decode rows of this rank's cache", slot,
               shape_.decode_rows);
  const int64_t row = shape_.prefill_rows + decode_length_[slot]++;
  const int32_t segment = 1;
  set_rows(slot, row, 1, &position, &segment);
  return row;
}

int64_t KvCache::rows_in_use() const {
  const int64_t longest = *std::max_element(decode_length_.begin(), decode_length_.end());
  return shape_.prefill_rows + longest;
}

void KvCache::store(int64_t layer, int64_t slot, int64_t row, int64_t n, TensorView k_in,
                    TensorView v_in) {
  MAXCTX_CHECK(layer >= 0 && layer < shape_.layers && slot >= 0 && slot < shape_.slots &&
                   row >= 0 && row + n <= shape_.rows(),
               "store of rows [{}, {}) of slot {} layer {} outside the cache", row, row + n, slot,
               layer);
  const int64_t at = offset(layer, slot, row);
  const int64_t count = n * shape_.row_elements();
  const auto rows_of = [&](const Tensor& t) { return t.view().elements(at, count); };
  MAXCTX_CHECK(k_in.numel() == count && v_in.numel() == count,
               "store of {} rows of {} elements got K of {} and V of {} elements", n,
               shape_.row_elements(), k_in.numel(), v_in.numel());
  if (!shape_.int8) {
    kernels_.copy(rows_of(k_), k_in);
    kernels_.copy(rows_of(v_), v_in);
    return;
  }
  const int64_t scale_at = (layer * shape_.slots + slot) * shape_.rows() + row;
  const auto scales_of = [&](const Tensor& t) { return t.view().elements(scale_at, n); };
  kernels_.quantize_rows_int8(rows_of(k_), scales_of(k_scale_), k_in, kernels::kInt8KvLevels);
  kernels_.quantize_rows_int8(rows_of(v_), scales_of(v_scale_), v_in, kernels::kInt8KvLevels);
}

KvView KvCache::view(int64_t layer) const {
  MAXCTX_CHECK(layer >= 0 && layer < shape_.layers, "layer {} of a {}-layer cache", layer,
               shape_.layers);
  KvView view;
  // One slot's rows in use are a prefix of its layer block; with several slots the rows keep
  // the cache's stride, and attention skips the empty ones.
  view.rows = shape_.slots == 1 ? rows_in_use() : shape_.rows();
  if (dirty_end_ > dirty_begin_) {
    const auto changed = [&](const std::vector<int32_t>& ids) {
      return std::span<const int32_t>(ids).subspan(static_cast<size_t>(dirty_begin_),
                                                   static_cast<size_t>(dirty_end_ - dirty_begin_));
    };
    positions_device_.write(kernels_, dirty_begin_, changed(positions_));
    segments_device_.write(kernels_, dirty_begin_, changed(segments_));
    dirty_begin_ = dirty_end_ = 0;
  }
  view.positions = positions_device_.data();
  view.segments = segments_device_.data();
  const int64_t at = offset(layer, 0, 0);
  const int64_t count = shape_.slots * view.rows * shape_.row_elements();
  view.k = k_.view().elements(at, count);
  view.v = v_.view().elements(at, count);
  if (shape_.int8) {
    const int64_t scale_at = layer * shape_.slots * shape_.rows();
    view.k_scale = k_scale_.view().elements(scale_at, shape_.slots * view.rows);
    view.v_scale = v_scale_.view().elements(scale_at, shape_.slots * view.rows);
  }
  return view;
}

int64_t KvCache::bytes() const {
  const int64_t scales = shape_.int8 ? 2 * k_scale_.numel() * int64_t{sizeof(float)} : 0;
  const int64_t ids = 2 * static_cast<int64_t>(positions_.size()) * int64_t{sizeof(int32_t)};
  return static_cast<int64_t>(k_.view().bytes() + v_.view().bytes()) + scales + ids;
}

int64_t KvCache::bytes_for(const KvCacheShape& s) {
  const int64_t rows = s.layers * s.slots * s.rows();
  const int64_t element = s.int8 ? 1 : static_cast<int64_t>(dtype_size(s.dtype));
  const int64_t scales = s.int8 ? 2 * rows * int64_t{sizeof(float)} : 0;
  const int64_t ids = 2 * s.slots * s.rows() * int64_t{sizeof(int32_t)};
  return 2 * rows * s.row_elements() * element + scales + ids;
}

int64_t KvCache::bytes_in_use() const {
  const auto element = static_cast<int64_t>(dtype_size(k_.dtype()));
  const int64_t per_row =
      2 * shape_.row_elements() * element + (shape_.int8 ? 2 * int64_t{sizeof(float)} : 0);
  return shape_.layers * shape_.slots * rows_in_use() * per_row;
}

}  // namespace maxctx::parallel

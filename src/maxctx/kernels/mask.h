// The attention mask's pure arithmetic, shared by host and device code: whether a (query, key)
// pair is visible, the position/segment ranges of a block of rows, and what those ranges say
// about a whole tile (skip, fully visible, or masked element by element). The cpu flash kernel
// and the CUDA kernels classify their tiles with these same functions, and kernels_mask_test
// checks them against the reference's attention_visible (kernels/types.h) on random layouts.
// Plain C++ outside nvcc: MAXCTX_HOST_DEVICE is empty there.
#pragma once

#include <cstdint>

#if defined(__CUDACC__)
#define MAXCTX_HOST_DEVICE __host__ __device__
#else
#define MAXCTX_HOST_DEVICE
#endif

namespace maxctx::kernels {

// Query at (q_pos, q_seg) sees key at (k_pos, k_seg): same segment, key not later, and with a
// window > 0 fewer than `window` positions back. The distance is taken in 64 bits so that any
// int32 positions work.
MAXCTX_HOST_DEVICE inline bool mask_visible(int32_t q_pos, int32_t q_seg, int32_t k_pos,
                                            int32_t k_seg, int32_t window) {
  const int64_t distance = static_cast<int64_t>(q_pos) - k_pos;
  return q_seg == k_seg && distance >= 0 && (window <= 0 || distance < window);
}

// The ranges of positions and segment ids in a block of rows.
struct BlockBounds {
  int32_t pos_min, pos_max, seg_min, seg_max;
};

MAXCTX_HOST_DEVICE inline BlockBounds bounds_of_row(int32_t pos, int32_t seg) {
  return BlockBounds{pos, pos, seg, seg};
}

MAXCTX_HOST_DEVICE inline BlockBounds bounds_add_row(BlockBounds r, int32_t pos, int32_t seg) {
  r.pos_min = pos < r.pos_min ? pos : r.pos_min;
  r.pos_max = pos > r.pos_max ? pos : r.pos_max;
  r.seg_min = seg < r.seg_min ? seg : r.seg_min;
  r.seg_max = seg > r.seg_max ? seg : r.seg_max;
  return r;
}

enum class TileMask : uint8_t { kSkip, kFull, kPartial };

// kSkip only when no (query, key) pair of the two blocks can be visible, kFull only when every
// pair is; everything else is kPartial (the mask is applied element by element).
MAXCTX_HOST_DEVICE inline TileMask classify_tile(const BlockBounds& q, const BlockBounds& k,
                                                 int32_t window) {
  const bool segments_disjoint = q.seg_max < k.seg_min || k.seg_max < q.seg_min;
  const bool keys_all_later = static_cast<int64_t>(q.pos_max) < k.pos_min;
  const bool keys_all_too_old = window > 0 && static_cast<int64_t>(q.pos_min) - k.pos_max >= window;
  if (segments_disjoint || keys_all_later || keys_all_too_old) return TileMask::kSkip;
  const bool one_segment =
      q.seg_min == q.seg_max && k.seg_min == k.seg_max && q.seg_min == k.seg_min;
  const bool keys_all_earlier = static_cast<int64_t>(k.pos_max) <= q.pos_min;
  const bool keys_all_in_window =
      window <= 0 || static_cast<int64_t>(q.pos_max) - k.pos_min < window;
  return one_segment && keys_all_earlier && keys_all_in_window ? TileMask::kFull
                                                               : TileMask::kPartial;
}

}  // namespace maxctx::kernels

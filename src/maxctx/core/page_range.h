// The pages of a byte range, for the allocators' residency (Allocator::commit / decommit): the
// host's pages, the emulated GPU's, and CUDA's mapped chunks all follow the same rule. Offsets
// count from a page-aligned origin (an allocation's start, or address 0).
#pragma once

#include <algorithm>
#include <cstddef>

namespace maxctx {

// Pages [first, last) of `page` bytes.
struct PageSpan {
  size_t first = 0, last = 0;
  bool empty() const { return first >= last; }
};

// Every page that holds a byte of [begin, end): what commit backs.
inline PageSpan pages_overlapping(size_t begin, size_t end, size_t page) {
  return {begin / page, (end + page - 1) / page};
}

// The pages wholly inside [begin, end): what decommit hands back.
inline PageSpan pages_inside(size_t begin, size_t end, size_t page) {
  return {(begin + page - 1) / page, end / page};
}

// The bytes of [begin, end) outside pages_inside, at most one run at each end, each within one
// page: what decommit zeroes instead. zero(from, to) for each non-empty run.
template <typename Zero>
void for_each_partial_end(size_t begin, size_t end, size_t page, Zero&& zero) {
  const PageSpan inside = pages_inside(begin, end, page);
  const size_t head_end = std::min(inside.first * page, end);
  const size_t tail_begin = std::max({inside.last * page, head_end, begin});
  if (begin < head_end) zero(begin, head_end);
  if (tail_begin < end) zero(tail_begin, end);
}

}  // namespace maxctx

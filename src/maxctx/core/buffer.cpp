#include "maxctx/core/buffer.h"

#include <cstdlib>
#include <cstring>
#include <new>

namespace maxctx {

AlignedBuffer::AlignedBuffer(size_t bytes) : size_(bytes) {
  if (bytes == 0) return;
  // aligned_alloc wants a multiple of the alignment.
  const size_t padded = (bytes + kBufferAlignment - 1) / kBufferAlignment * kBufferAlignment;
  void* p = std::aligned_alloc(kBufferAlignment, padded);
  if (p == nullptr) throw std::bad_alloc();
  std::memset(p, 0, padded);
  data_.reset(static_cast<std::byte*>(p));
}

void AlignedBuffer::Free::operator()(std::byte* p) const { std::free(p); }

}  // namespace maxctx

// Owned, zero-initialised, 64-byte-aligned memory of one device: one cache line and one AVX-512
// vector, so every tensor starts on a boundary the SIMD kernels and MPI copies like. Allocated
// and freed through the Allocator it was made with (the host's unless a backend says otherwise).
#pragma once

#include <cstddef>
#include <memory>

#include "maxctx/core/device.h"

namespace maxctx {

inline constexpr size_t kBufferAlignment = 64;

class AlignedBuffer {
 public:
  AlignedBuffer() = default;
  explicit AlignedBuffer(size_t bytes, const Allocator& allocator = host_allocator(),
                         Residency residency = Residency::kCommitted);

  std::byte* data() { return data_.get(); }
  const std::byte* data() const { return data_.get(); }
  size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  Device device() const;

 private:
  struct Free {
    const Allocator* allocator;  // the host's when null (a value-initialised Free)
    size_t bytes;                // as allocated (mapped buffers are unmapped by size)
    void operator()(std::byte* p) const;
  };
  std::unique_ptr<std::byte[], Free> data_;
  size_t size_ = 0;
};

}  // namespace maxctx

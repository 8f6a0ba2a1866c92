// Where a tensor's memory lives, and who allocates it.
//
// A Device names a kind of memory (host, CUDA); an Allocator hands out zeroed, 64-byte-aligned
// memory of one device. core/ knows only the host allocator: a backend (kernels/<backend>/)
// brings its own, and every buffer above kernels/ is allocated through the backend it will be
// used with (Kernels::allocator()), so model, parallel and infer code never names a device.
#pragma once

#include <cstddef>
#include <string_view>

namespace maxctx {

enum class Device : unsigned char { kCpu, kCuda };

std::string_view device_name(Device device);  // "cpu", "cuda"

class Allocator {
 public:
  virtual ~Allocator() = default;
  virtual Device device() const = 0;
  // `bytes` zeroed bytes aligned to kBufferAlignment; never null (throws std::bad_alloc).
  virtual void* allocate(size_t bytes) const = 0;
  virtual void deallocate(void* memory) const = 0;
};

// Host memory (aligned_alloc + memset): the cpu backend's allocator and core's default.
const Allocator& host_allocator();

}  // namespace maxctx

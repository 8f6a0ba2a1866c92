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
  // `memory` and `bytes` as allocate returned and was asked.
  virtual void deallocate(void* memory, size_t bytes) const = 0;
  // The contents of [memory, memory + bytes), inside one allocation, are no longer needed: they
  // read as zero afterwards, and the device takes back the pages wholly inside the range, which
  // count as memory in use again only once written (fsdp frees a gathered weight unit this way
  // while its views stay valid).
  virtual void discard(void* memory, size_t bytes) const = 0;
  // How many bytes of the pages overlapping [memory, memory + bytes) the device holds now
  // (memory accounting for benchmarks; host: mincore).
  virtual size_t resident_bytes(const void* memory, size_t bytes) const = 0;
  // Bytes between host memory and this device's: loading, checkpoints, logging, the int32 index
  // arrays a step uploads, and collectives staged through the host (mesh/). Synchronous: the
  // host side may be reused, and the device memory read by any later op, when the call returns.
  // (host: memcpy.)
  virtual void copy_to_host(void* host, const void* memory, size_t bytes) const = 0;
  virtual void copy_from_host(void* memory, const void* host, size_t bytes) const = 0;
};

// Host memory: the cpu backend's allocator and core's default. Small buffers come from
// aligned_alloc + memset; large ones from anonymous mappings, whose zero pages become resident
// only when first written (so a buffer of which a step touches a part costs that part).
const Allocator& host_allocator();

}  // namespace maxctx

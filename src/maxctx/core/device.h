// Where a tensor's memory lives, and who allocates it.
//
// A Device names a kind of memory (host, CUDA); an Allocator hands out zeroed, 64-byte-aligned
// memory of one device. core/ knows only the host allocator: a backend (kernels/<backend>/)
// brings its own, and every buffer above kernels/ is allocated through the backend it will be
// used with (Kernels::allocator()), so model, parallel and infer code never names a device.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

namespace maxctx {

enum class Device : unsigned char { kCpu, kCuda };

std::string_view device_name(Device device);  // "cpu", "cuda"

// Whether a new allocation's pages hold memory from the start (kCommitted: zeroed and ready),
// or are address space only until Allocator::commit (kReserved: fsdp's full parameter and
// gradient buffers, of which only the units in use hold memory).
enum class Residency : unsigned char { kCommitted, kReserved };

// Device memory an allocator holds committed, in bytes: now, and at most since reset_peak.
struct CommittedBytes {
  int64_t now = 0;
  int64_t peak = 0;
};

class Allocator {
 public:
  virtual ~Allocator() = default;
  virtual Device device() const = 0;
  // `bytes` zeroed bytes aligned to kBufferAlignment; never null (throws std::bad_alloc).
  virtual void* allocate(size_t bytes) const = 0;
  // `bytes` of address space aligned to kBufferAlignment whose pages are all decommitted: each
  // is committed (and reads as zero) before it is used. Never null (std::bad_alloc).
  virtual void* allocate_reserved(size_t bytes) const = 0;
  // `memory` and `bytes` as allocate or allocate_reserved returned and was asked.
  virtual void deallocate(void* memory, size_t bytes) const = 0;
  // Residency of part of one allocation, with its views kept valid (fsdp commits a weight
  // unit's range before it is gathered and decommits it once used):
  //  - decommit: the contents of [memory, memory + bytes) are no longer needed. The device
  //    takes back the pages wholly inside the range; the partial pages at its ends stay and are
  //    zeroed. Touching a decommitted page before committing it again is an error the device
  //    reports as it can: the emulated GPU faults, CUDA's unmapped range is an illegal address,
  //    the host hands the page back zeroed (MADV_DONTNEED; commit is free there).
  //  - commit: every page overlapping the range holds memory again; the decommitted ones read
  //    as zero. Committing committed pages changes nothing.
  virtual void commit(void* memory, size_t bytes) const = 0;
  virtual void decommit(void* memory, size_t bytes) const = 0;
  // How many bytes of the pages overlapping [memory, memory + bytes) the device holds now
  // (memory accounting for benchmarks; host: mincore).
  virtual size_t resident_bytes(const void* memory, size_t bytes) const = 0;
  // What this allocator holds committed over all its allocations, where it keeps count (the
  // device backends); the host does not (nullopt: its pages come and go with the kernel's
  // faults, see resident_bytes).
  virtual std::optional<CommittedBytes> committed_bytes() const { return std::nullopt; }
  // Starts a new peak for committed_bytes at what is committed now.
  virtual void reset_peak() const {}
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

#include <cuda.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <map>
#include <mutex>
#include <new>
#include <string>
#include <vector>

#include "maxctx/core/committed_count.h"
#include "maxctx/core/page_range.h"
#include "maxctx/kernels/cuda/allocator.h"
#include "maxctx/kernels/cuda/cuda_check.h"

namespace maxctx::kernels::cuda {
namespace {

// The driver's virtual memory management (cuMemAddressReserve, cuMemCreate, cuMemMap, ...),
// reached through the runtime's entry-point lookup so that the binary does not link libcuda
// (it runs on machines without a driver, where the cpu backend is all there is).
struct DriverVmm {
  decltype(&cuMemAddressReserve) address_reserve = nullptr;
  decltype(&cuMemAddressFree) address_free = nullptr;
  decltype(&cuMemCreate) create = nullptr;
  decltype(&cuMemRelease) release = nullptr;
  decltype(&cuMemMap) map = nullptr;
  decltype(&cuMemUnmap) unmap = nullptr;
  decltype(&cuMemSetAccess) set_access = nullptr;
  decltype(&cuMemGetAllocationGranularity) granularity_of = nullptr;
  int device = 0;
  size_t granularity = 0;  // 0: no virtual memory management on this device
};

template <typename F>
bool lookup(const char* symbol, F& function) {
  void* address = nullptr;
  cudaDriverEntryPointQueryResult found = cudaDriverEntryPointSymbolNotFound;
  if (cudaGetDriverEntryPointByVersion(symbol, &address, 12000, cudaEnableDefault, &found) !=
          cudaSuccess ||
      found != cudaDriverEntryPointSuccess) {
    cudaGetLastError();
    return false;
  }
  function = reinterpret_cast<F>(address);
  return true;
}

void driver_check(CUresult status, const char* call) {
  if (status == CUDA_SUCCESS) return;
  cuda_call_failed(call, ("driver error " + std::to_string(static_cast<int>(status))).c_str());
}
#define MAXCTX_DRIVER_CHECK(call) driver_check((call), #call)

CUmemAllocationProp device_memory(int device) {
  CUmemAllocationProp prop;
  std::memset(&prop, 0, sizeof(prop));
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = device;
  return prop;
}

// Looked up once per process, for the device current then (one rank drives one GPU).
const DriverVmm& driver_vmm() {
  static const DriverVmm kVmm = [] {
    DriverVmm v;
    MAXCTX_CUDA_CHECK(cudaGetDevice(&v.device));
    decltype(&cuDeviceGet) device_get = nullptr;
    decltype(&cuDeviceGetAttribute) attribute_of = nullptr;
    const bool found =
        lookup("cuDeviceGet", device_get) && lookup("cuDeviceGetAttribute", attribute_of) &&
        lookup("cuMemAddressReserve", v.address_reserve) &&
        lookup("cuMemAddressFree", v.address_free) && lookup("cuMemCreate", v.create) &&
        lookup("cuMemRelease", v.release) && lookup("cuMemMap", v.map) &&
        lookup("cuMemUnmap", v.unmap) && lookup("cuMemSetAccess", v.set_access) &&
        lookup("cuMemGetAllocationGranularity", v.granularity_of);
    int supported = 0;
    if (found) {
      CUdevice device = 0;
      MAXCTX_DRIVER_CHECK(device_get(&device, v.device));
      MAXCTX_DRIVER_CHECK(attribute_of(
          &supported, CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, device));
    }
    if (supported != 0 && found) {
      const CUmemAllocationProp prop = device_memory(v.device);
      MAXCTX_DRIVER_CHECK(
          v.granularity_of(&v.granularity, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
    }
    return v;
  }();
  return kVmm;
}

// From this size on (and where the device has virtual memory management) an allocation is a
// reserved address range whose chunks of `granularity` bytes (2 MiB on current GPUs) are mapped
// to physical memory on commit and unmapped on decommit, so its views stay valid while fsdp
// hands the memory of a weight unit back. Smaller ones are cudaMalloc'd and always resident.
constexpr size_t kVirtualFrom = size_t{2} << 20;

// One allocation: cudaMalloc'd (chunks empty), or a reserved range and its chunks' handles
// (0: not mapped).
struct Allocation {
  size_t bytes = 0;     // as asked
  size_t reserved = 0;  // the address range, a multiple of the granularity (virtual only)
  std::vector<CUmemGenericAllocationHandle> chunks;
  bool is_virtual() const { return reserved > 0; }
};

class CudaAllocator final : public Allocator {
 public:
  Device device() const override { return Device::kCuda; }
  void* allocate(size_t bytes) const override {
    if (!uses_virtual(bytes)) return allocate_plain(bytes);
    void* memory = reserve(bytes);
    commit(memory, bytes);
    return memory;
  }
  void* allocate_reserved(size_t bytes) const override {
    return uses_virtual(bytes) ? reserve(bytes) : allocate_plain(bytes);
  }
  void deallocate(void* memory, size_t /*bytes*/) const override {
    const std::lock_guard lock(mutex_);
    const auto it = allocations_.find(reinterpret_cast<uintptr_t>(memory));
    if (it == allocations_.end()) return;  // torn down with the runtime already
    Allocation& a = it->second;
    if (!a.is_virtual()) {
      // cudaFree synchronizes the device, so no queued kernel still reads the memory. During
      // teardown the runtime may already be gone: that is not an error worth a second failure.
      const cudaError_t status = cudaFree(memory);
      if (status != cudaSuccess && status != cudaErrorCudartUnloading) MAXCTX_CUDA_CHECK(status);
      committed_.add(-static_cast<int64_t>(a.bytes));
    } else {
      const DriverVmm& v = driver_vmm();
      if (cudaDeviceSynchronize() == cudaSuccess) {  // no queued kernel reads what is unmapped
        for (size_t i = 0; i < a.chunks.size(); ++i) release_chunk(it->first, a, i);
        v.address_free(static_cast<CUdeviceptr>(it->first), a.reserved);
      }
    }
    allocations_.erase(it);
  }
  void commit(void* memory, size_t bytes) const override {
    if (bytes == 0) return;
    const std::lock_guard lock(mutex_);
    const Located at = locate(memory, bytes);
    if (!at.allocation.is_virtual()) return;
    const DriverVmm& v = driver_vmm();
    const PageSpan chunks = pages_overlapping(at.begin, at.end, v.granularity);
    for (size_t i = chunks.first; i < chunks.last; ++i) {
      if (at.allocation.chunks[i] == 0) map_chunk(at.base, at.allocation, i);
    }
  }
  void decommit(void* memory, size_t bytes) const override {
    if (bytes == 0) return;
    const std::lock_guard lock(mutex_);
    const Located at = locate(memory, bytes);
    if (!at.allocation.is_virtual()) {
      MAXCTX_CUDA_CHECK(cudaMemset(memory, 0, bytes));  // cudaMalloc'd memory stays resident
      return;
    }
    const size_t g = driver_vmm().granularity;
    // The partial chunks at the ends stay mapped; their bytes in the range are zeroed.
    for_each_partial_end(at.begin, at.end, g, [&](size_t from, size_t to) {
      if (at.allocation.chunks[from / g] != 0) {
        MAXCTX_CUDA_CHECK(cudaMemset(reinterpret_cast<void*>(at.base + from), 0, to - from));
      }
    });
    const PageSpan chunks = pages_inside(at.begin, at.end, g);
    if (chunks.empty()) return;
    // The kernels queued before this call may still read the chunks: unmap after them.
    MAXCTX_CUDA_CHECK(cudaDeviceSynchronize());
    for (size_t i = chunks.first; i < chunks.last; ++i) release_chunk(at.base, at.allocation, i);
  }
  size_t resident_bytes(const void* memory, size_t bytes) const override {
    if (bytes == 0) return 0;
    const std::lock_guard lock(mutex_);
    const Located at = locate(memory, bytes);
    if (!at.allocation.is_virtual()) return bytes;  // a cudaMalloc'd range is held from the start
    const size_t g = driver_vmm().granularity;
    const PageSpan chunks = pages_overlapping(at.begin, at.end, g);
    size_t held = 0;
    for (size_t i = chunks.first; i < chunks.last; ++i)
      held += at.allocation.chunks[i] != 0 ? g : 0;
    return held;
  }
  std::optional<CommittedBytes> committed_bytes() const override { return committed_.read(); }
  void count_outside(int64_t bytes) const { committed_.add(bytes); }
  void reset_peak() const override { committed_.reset_peak(); }
  void copy_to_host(void* host, const void* memory, size_t bytes) const override {
    if (bytes == 0) return;
    MAXCTX_CUDA_CHECK(cudaMemcpy(host, memory, bytes, cudaMemcpyDeviceToHost));
  }
  void copy_from_host(void* memory, const void* host, size_t bytes) const override {
    if (bytes == 0) return;
    MAXCTX_CUDA_CHECK(cudaMemcpy(memory, host, bytes, cudaMemcpyHostToDevice));
  }

 private:
  static bool uses_virtual(size_t bytes) {
    return bytes >= kVirtualFrom && driver_vmm().granularity > 0;
  }

  void* allocate_plain(size_t bytes) const {
    void* memory = nullptr;
    const cudaError_t status = cudaMalloc(&memory, bytes == 0 ? 1 : bytes);
    if (status == cudaErrorMemoryAllocation) {
      cudaGetLastError();
      throw std::bad_alloc();  // the Allocator contract: out of memory is bad_alloc
    }
    MAXCTX_CUDA_CHECK(status);
    MAXCTX_CUDA_CHECK(cudaMemset(memory, 0, bytes));
    const std::lock_guard lock(mutex_);
    allocations_[reinterpret_cast<uintptr_t>(memory)] = Allocation{bytes, 0, {}};
    committed_.add(static_cast<int64_t>(bytes));
    return memory;
  }

  // An address range with nothing mapped.
  void* reserve(size_t bytes) const {
    const DriverVmm& v = driver_vmm();
    const size_t reserved = (bytes + v.granularity - 1) / v.granularity * v.granularity;
    CUdeviceptr base = 0;
    const CUresult status = v.address_reserve(&base, reserved, v.granularity, 0, 0);
    if (status == CUDA_ERROR_OUT_OF_MEMORY) throw std::bad_alloc();
    MAXCTX_DRIVER_CHECK(status);
    const std::lock_guard lock(mutex_);
    Allocation a{bytes, reserved,
                 std::vector<CUmemGenericAllocationHandle>(reserved / v.granularity, 0)};
    allocations_[static_cast<uintptr_t>(base)] = std::move(a);
    return reinterpret_cast<void*>(base);
  }

  // Chunk i unmapped and its memory released (nothing when it is not mapped). Caller holds the
  // lock, and has synchronized with the kernels that may read it.
  void release_chunk(uintptr_t base, Allocation& a, size_t i) const {
    if (a.chunks[i] == 0) return;
    const DriverVmm& v = driver_vmm();
    MAXCTX_DRIVER_CHECK(v.unmap(static_cast<CUdeviceptr>(base + i * v.granularity), v.granularity));
    MAXCTX_DRIVER_CHECK(v.release(a.chunks[i]));
    a.chunks[i] = 0;
    committed_.add(-static_cast<int64_t>(v.granularity));
  }

  // Chunk i backed by new physical memory, mapped read-write and zeroed. Caller holds the lock.
  void map_chunk(uintptr_t base, Allocation& a, size_t i) const {
    const DriverVmm& v = driver_vmm();
    const CUmemAllocationProp prop = device_memory(v.device);
    CUmemGenericAllocationHandle handle = 0;
    const CUresult created = v.create(&handle, v.granularity, &prop, 0);
    if (created == CUDA_ERROR_OUT_OF_MEMORY) throw std::bad_alloc();
    MAXCTX_DRIVER_CHECK(created);
    const CUdeviceptr chunk = base + i * v.granularity;
    MAXCTX_DRIVER_CHECK(v.map(chunk, v.granularity, 0, handle, 0));
    CUmemAccessDesc access;
    std::memset(&access, 0, sizeof(access));
    access.location = prop.location;
    access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    MAXCTX_DRIVER_CHECK(v.set_access(chunk, v.granularity, &access, 1));
    MAXCTX_CUDA_CHECK(cudaMemset(reinterpret_cast<void*>(chunk), 0, v.granularity));
    a.chunks[i] = handle;
    committed_.add(static_cast<int64_t>(v.granularity));
  }

  // A range inside one allocation: its base address, the allocation, the range as offsets.
  struct Located {
    uintptr_t base;
    Allocation& allocation;
    size_t begin, end;
  };
  // The allocation that holds [memory, memory + bytes). Caller holds the lock.
  Located locate(const void* memory, size_t bytes) const {
    const auto address = reinterpret_cast<uintptr_t>(memory);
    auto it = allocations_.upper_bound(address);
    if (it == allocations_.begin() ||
        address + bytes > std::prev(it)->first + std::prev(it)->second.bytes) {
      cuda_call_failed("cuda allocator", "a range outside every allocation of this allocator");
    }
    --it;
    const size_t begin = address - it->first;
    return {it->first, it->second, begin, begin + bytes};
  }

  mutable std::mutex mutex_;
  mutable std::map<uintptr_t, Allocation> allocations_;  // by base address
  mutable CommittedCount committed_;
};

struct ScratchBuffers {
  std::array<void*, static_cast<size_t>(Scratch::kCount)> data{};
  std::array<size_t, static_cast<size_t>(Scratch::kCount)> bytes{};
  // Kept for the process's lifetime: freeing at exit would race the runtime's own teardown.
};

}  // namespace

const Allocator& cuda_allocator() {
  static const CudaAllocator kAllocator;
  return kAllocator;
}

void count_outside_memory(int64_t bytes) {
  static_cast<const CudaAllocator&>(cuda_allocator()).count_outside(bytes);
}

void* scratch(Scratch slot, size_t bytes) {
  static ScratchBuffers buffers;
  const auto i = static_cast<size_t>(slot);
  if (buffers.bytes[i] < bytes) {
    if (buffers.data[i] != nullptr) MAXCTX_CUDA_CHECK(cudaFree(buffers.data[i]));
    count_outside_memory(-static_cast<int64_t>(buffers.bytes[i]));
    buffers.data[i] = nullptr;
    buffers.bytes[i] = 0;
    const size_t grown = bytes + bytes / 4;  // amortize growth
    MAXCTX_CUDA_CHECK(cudaMalloc(&buffers.data[i], grown));
    buffers.bytes[i] = grown;
    count_outside_memory(static_cast<int64_t>(grown));
  }
  return buffers.data[i];
}

}  // namespace maxctx::kernels::cuda

#include <array>
#include <new>

#include "maxctx/kernels/cuda/allocator.h"
#include "maxctx/kernels/cuda/cuda_check.h"

namespace maxctx::kernels::cuda {
namespace {

class CudaAllocator final : public Allocator {
 public:
  Device device() const override { return Device::kCuda; }
  void* allocate(size_t bytes) const override {
    void* memory = nullptr;
    const cudaError_t status = cudaMalloc(&memory, bytes == 0 ? 1 : bytes);
    if (status == cudaErrorMemoryAllocation) {
      cudaGetLastError();
      throw std::bad_alloc();  // the Allocator contract: out of memory is bad_alloc
    }
    MAXCTX_CUDA_CHECK(status);
    MAXCTX_CUDA_CHECK(cudaMemset(memory, 0, bytes));
    return memory;
  }
  void deallocate(void* memory, size_t /*bytes*/) const override {
    // cudaFree synchronizes the device, so no queued kernel still reads the memory. During
    // teardown the runtime may already be gone: that is not an error worth a second failure.
    const cudaError_t status = cudaFree(memory);
    if (status != cudaSuccess && status != cudaErrorCudartUnloading) MAXCTX_CUDA_CHECK(status);
  }
  // Zeroes the range. Device pages are not handed back: cudaMalloc'd memory stays the process's
  // until freed (a virtual-memory allocator could unmap physical pages; this one does not), so
  // resident_bytes does not drop after a discard.
  void discard(void* memory, size_t bytes) const override {
    MAXCTX_CUDA_CHECK(cudaMemset(memory, 0, bytes));
  }
  // All of a cudaMalloc'd range is held by the device from allocation on.
  size_t resident_bytes(const void* /*memory*/, size_t bytes) const override { return bytes; }
  void copy_to_host(void* host, const void* memory, size_t bytes) const override {
    if (bytes == 0) return;
    MAXCTX_CUDA_CHECK(cudaMemcpy(host, memory, bytes, cudaMemcpyDeviceToHost));
  }
  void copy_from_host(void* memory, const void* host, size_t bytes) const override {
    if (bytes == 0) return;
    MAXCTX_CUDA_CHECK(cudaMemcpy(memory, host, bytes, cudaMemcpyHostToDevice));
  }
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

void* scratch(Scratch slot, size_t bytes) {
  static ScratchBuffers buffers;
  const auto i = static_cast<size_t>(slot);
  if (buffers.bytes[i] < bytes) {
    if (buffers.data[i] != nullptr) MAXCTX_CUDA_CHECK(cudaFree(buffers.data[i]));
    buffers.data[i] = nullptr;
    buffers.bytes[i] = 0;
    const size_t grown = bytes + bytes / 4;  // amortize growth
    MAXCTX_CUDA_CHECK(cudaMalloc(&buffers.data[i], grown));
    buffers.bytes[i] = grown;
  }
  return buffers.data[i];
}

}  // namespace maxctx::kernels::cuda

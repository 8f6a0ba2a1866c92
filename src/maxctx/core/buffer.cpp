#include "maxctx/core/buffer.h"

#include <cstdlib>
#include <cstring>
#include <new>

namespace maxctx {
namespace {

class HostAllocator final : public Allocator {
 public:
  Device device() const override { return Device::kCpu; }
  void* allocate(size_t bytes) const override {
    // aligned_alloc wants a multiple of the alignment.
    const size_t padded = (bytes + kBufferAlignment - 1) / kBufferAlignment * kBufferAlignment;
    void* p = std::aligned_alloc(kBufferAlignment, padded == 0 ? kBufferAlignment : padded);
    if (p == nullptr) throw std::bad_alloc();
    std::memset(p, 0, padded);
    return p;
  }
  void deallocate(void* memory) const override { std::free(memory); }
};

}  // namespace

std::string_view device_name(Device device) { return device == Device::kCpu ? "cpu" : "cuda"; }

const Allocator& host_allocator() {
  // Never destroyed: a static AlignedBuffer constructed before the first call (the MPI ring's
  // scratch) is freed after it at exit, through this allocator (UBSan in make test-asan).
  static const HostAllocator& kHost = *new HostAllocator();
  return kHost;
}

AlignedBuffer::AlignedBuffer(size_t bytes, const Allocator& allocator)
    : data_(nullptr, Free{&allocator}), size_(bytes) {
  if (bytes == 0) return;
  data_.reset(static_cast<std::byte*>(allocator.allocate(bytes)));
}

void AlignedBuffer::Free::operator()(std::byte* p) const {
  (allocator != nullptr ? *allocator : host_allocator()).deallocate(p);
}

Device AlignedBuffer::device() const {
  const Allocator* allocator = data_.get_deleter().allocator;
  return allocator != nullptr ? allocator->device() : Device::kCpu;
}

}  // namespace maxctx

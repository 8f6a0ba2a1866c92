#include "maxctx/core/buffer.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <new>
#include <vector>

#include "maxctx/core/page_range.h"

namespace maxctx {
namespace {

// From this size on a buffer is its own anonymous mapping: page-aligned, zero without a
// memset, resident only where written, and given back to the system when freed.
constexpr size_t kMappedFrom = size_t{1} << 20;

size_t page_size() {
  static const size_t kPage = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
  return kPage;
}

class HostAllocator final : public Allocator {
 public:
  Device device() const override { return Device::kCpu; }
  void* allocate(size_t bytes) const override {
    if (bytes >= kMappedFrom) {
      void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
      if (p == MAP_FAILED) throw std::bad_alloc();
      return p;
    }
    // aligned_alloc wants a multiple of the alignment.
    const size_t padded = (bytes + kBufferAlignment - 1) / kBufferAlignment * kBufferAlignment;
    void* p = std::aligned_alloc(kBufferAlignment, padded == 0 ? kBufferAlignment : padded);
    if (p == nullptr) throw std::bad_alloc();
    std::memset(p, 0, padded);
    return p;
  }
  void deallocate(void* memory, size_t bytes) const override {
    if (bytes >= kMappedFrom) {
      ::munmap(memory, bytes);
    } else {
      std::free(memory);
    }
  }
  // Address space is all a reservation needs here: an anonymous mapping's untouched pages hold
  // no memory, and the small buffers' heap pages are the process's anyway.
  void* allocate_reserved(size_t bytes) const override { return allocate(bytes); }
  // A page comes back, zeroed, when first touched.
  void commit(void* /*memory*/, size_t /*bytes*/) const override {}
  void decommit(void* memory, size_t bytes) const override {
    // Whole pages go back to the system (MADV_DONTNEED: private anonymous pages read as zero
    // afterwards); the partial pages at either end are zeroed by hand.
    const auto begin = reinterpret_cast<uintptr_t>(memory);
    const size_t page = page_size();
    for_each_partial_end(begin, begin + bytes, page, [](size_t from, size_t to) {
      std::memset(reinterpret_cast<void*>(from), 0, to - from);
    });
    const PageSpan inside = pages_inside(begin, begin + bytes, page);
    if (inside.empty()) return;
    void* first = reinterpret_cast<void*>(inside.first * page);
    const size_t whole = (inside.last - inside.first) * page;
    if (::madvise(first, whole, MADV_DONTNEED) != 0) {
      std::memset(first, 0, whole);  // still zero, just resident
    }
  }
  void copy_to_host(void* host, const void* memory, size_t bytes) const override {
    if (bytes > 0) std::memcpy(host, memory, bytes);
  }
  void copy_from_host(void* memory, const void* host, size_t bytes) const override {
    if (bytes > 0) std::memcpy(memory, host, bytes);
  }
  size_t resident_bytes(const void* memory, size_t bytes) const override {
    if (bytes == 0) return 0;
    const size_t page = page_size();
    const uintptr_t first = reinterpret_cast<uintptr_t>(memory) / page * page;
    const uintptr_t end = reinterpret_cast<uintptr_t>(memory) + bytes;
    const size_t pages = (end - first + page - 1) / page;
    std::vector<unsigned char> resident(pages);
    if (::mincore(reinterpret_cast<void*>(first), pages * page, resident.data()) != 0) return 0;
    size_t count = 0;
    for (unsigned char r : resident) count += r & 1;
    return count * page;
  }
};

}  // namespace

std::string_view device_name(Device device) { return device == Device::kCpu ? "cpu" : "cuda"; }

const Allocator& host_allocator() {
  // Never destroyed: a static AlignedBuffer constructed before the first call (the MPI ring's
  // scratch) is freed after it at exit, through this allocator (UBSan in make test-asan).
  static const HostAllocator& kHost = *new HostAllocator();
  return kHost;
}

AlignedBuffer::AlignedBuffer(size_t bytes, const Allocator& allocator, Residency residency)
    : data_(nullptr, Free{&allocator, bytes}), size_(bytes) {
  if (bytes == 0) return;
  data_.reset(static_cast<std::byte*>(residency == Residency::kCommitted
                                          ? allocator.allocate(bytes)
                                          : allocator.allocate_reserved(bytes)));
}

void AlignedBuffer::Free::operator()(std::byte* p) const {
  (allocator != nullptr ? *allocator : host_allocator()).deallocate(p, bytes);
}

Device AlignedBuffer::device() const {
  const Allocator* allocator = data_.get_deleter().allocator;
  return allocator != nullptr ? allocator->device() : Device::kCpu;
}

}  // namespace maxctx

#include "maxctx/kernels/emulated/emulated_memory.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <mutex>
#include <new>
#include <vector>

#include "maxctx/core/check.h"
#include "maxctx/core/committed_count.h"
#include "maxctx/core/page_range.h"
#include "maxctx/kernels/emulated/emulated_gpu.h"

namespace maxctx::kernels::emulated {
namespace {

size_t page_size() {
  static const size_t kPage = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
  return kPage;
}

void* disguise(void* host) {
  return reinterpret_cast<void*>(reinterpret_cast<uintptr_t>(host) | kDisguiseBit);
}

// One mapping and which of its pages are decommitted.
struct Mapping {
  size_t bytes = 0;               // as asked
  std::vector<bool> decommitted;  // per page
  // The bytes of `pages` that are committed (the last page counts only up to `bytes`).
  int64_t committed_in(PageSpan pages) const {
    const size_t page = page_size();
    int64_t held = 0;
    for (size_t i = pages.first; i < pages.last; ++i) {
      if (!decommitted[i]) held += static_cast<int64_t>(std::min(page, bytes - i * page));
    }
    return held;
  }
  int64_t committed_bytes() const { return committed_in({0, decommitted.size()}); }
};

// A range inside one mapping: the mapping's host start, the mapping, and the range as offsets.
struct Located {
  std::byte* base;
  Mapping& mapping;
  size_t begin, end;
};

class EmulatedAllocator final : public Allocator {
 public:
  Device device() const override { return Device::kCuda; }
  void* allocate(size_t bytes) const override { return map(bytes, Residency::kCommitted); }
  void* allocate_reserved(size_t bytes) const override { return map(bytes, Residency::kReserved); }
  void deallocate(void* memory, size_t bytes) const override {
    auto* host = static_cast<std::byte*>(host_address(memory, "deallocate"));
    const std::lock_guard lock(mutex_);
    const auto it = mappings_.find(host);
    MAXCTX_CHECK(it != mappings_.end() && it->second.bytes == bytes,
                 "emulated GPU: deallocate of {} bytes at {} that were not allocated", bytes,
                 memory);
    committed_.add(-it->second.committed_bytes());
    ::munmap(host, mapped_bytes(bytes));
    mappings_.erase(it);
  }
  void commit(void* memory, size_t bytes) const override {
    set_pages(memory, bytes, /*decommit=*/false);
  }
  void decommit(void* memory, size_t bytes) const override {
    set_pages(memory, bytes, /*decommit=*/true);
  }
  size_t resident_bytes(const void* memory, size_t bytes) const override {
    if (bytes == 0) return 0;
    const std::lock_guard lock(mutex_);
    const Located at = locate(memory, bytes, "resident_bytes");
    return static_cast<size_t>(
        at.mapping.committed_in(pages_overlapping(at.begin, at.end, page_size())));
  }
  std::optional<CommittedBytes> committed_bytes() const override { return committed_.read(); }
  void reset_peak() const override { committed_.reset_peak(); }
  void copy_to_host(void* host_memory, const void* memory, size_t bytes) const override {
    MAXCTX_CHECK(!is_disguised(host_memory), "emulated GPU: copy_to_host into device memory");
    if (bytes > 0) std::memcpy(host_memory, host_address(memory, "copy_to_host"), bytes);
  }
  void copy_from_host(void* memory, const void* host_memory, size_t bytes) const override {
    MAXCTX_CHECK(!is_disguised(host_memory), "emulated GPU: copy_from_host out of device memory");
    if (bytes > 0) std::memcpy(host_address(memory, "copy_from_host"), host_memory, bytes);
  }

 private:
  static size_t mapped_bytes(size_t bytes) {
    const size_t page = page_size();
    return std::max<size_t>(1, (bytes + page - 1) / page) * page;
  }

  void* map(size_t bytes, Residency residency) const {
    const bool reserved = residency == Residency::kReserved;
    void* p = ::mmap(nullptr, mapped_bytes(bytes), reserved ? PROT_NONE : PROT_READ | PROT_WRITE,
                     MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) throw std::bad_alloc();
    Mapping m;
    m.bytes = bytes;
    m.decommitted.assign(mapped_bytes(bytes) / page_size(), reserved);
    const std::lock_guard lock(mutex_);
    committed_.add(m.committed_bytes());
    mappings_.emplace(static_cast<std::byte*>(p), std::move(m));
    return disguise(p);
  }

  // The mapping that holds [memory, memory + bytes); a range outside every mapping is an error.
  // The caller holds the lock.
  Located locate(const void* memory, size_t bytes, const char* what) const {
    auto* host = static_cast<std::byte*>(host_address(memory, what));
    auto it = mappings_.upper_bound(host);
    MAXCTX_CHECK(it != mappings_.begin(), "emulated GPU: {} of unallocated memory", what);
    --it;
    MAXCTX_CHECK(host + bytes <= it->first + it->second.bytes,
                 "emulated GPU: {} of {} bytes runs past its allocation", what, bytes);
    const auto begin = static_cast<size_t>(host - it->first);
    return {it->first, it->second, begin, begin + bytes};
  }

  // Commit: every page overlapping the range, readable and writable again (a decommitted page
  // was given back with MADV_DONTNEED, so it reads as zero). Decommit: the pages wholly inside,
  // given back and made inaccessible; the partial pages at the ends zeroed where committed (a
  // decommitted one reads as zero once committed).
  void set_pages(void* memory, size_t bytes, bool decommit) const {
    if (bytes == 0) return;
    const std::lock_guard lock(mutex_);
    const Located at = locate(memory, bytes, decommit ? "decommit" : "commit");
    std::vector<bool>& decommitted = at.mapping.decommitted;
    const size_t page = page_size();
    if (decommit) {
      for_each_partial_end(at.begin, at.end, page, [&](size_t from, size_t to) {
        if (!decommitted[from / page]) std::memset(at.base + from, 0, to - from);
      });
    }
    const PageSpan pages =
        decommit ? pages_inside(at.begin, at.end, page) : pages_overlapping(at.begin, at.end, page);
    const int64_t held_before = at.mapping.committed_in(pages);
    // Runs of pages whose state changes, one madvise / mprotect each.
    for (size_t i = pages.first; i < pages.last;) {
      size_t j = i;
      while (j < pages.last && decommitted[j] != decommit) decommitted[j++] = decommit;
      if (j == i) {
        ++i;
        continue;
      }
      std::byte* run = at.base + i * page;
      const size_t run_bytes = (j - i) * page;
      if (decommit) {
        MAXCTX_CHECK(::madvise(run, run_bytes, MADV_DONTNEED) == 0, "emulated GPU: madvise");
      }
      MAXCTX_CHECK(::mprotect(run, run_bytes, decommit ? PROT_NONE : PROT_READ | PROT_WRITE) == 0,
                   "emulated GPU: mprotect");
      i = j;
    }
    committed_.add(at.mapping.committed_in(pages) - held_before);
  }

  mutable std::mutex mutex_;
  mutable std::map<std::byte*, Mapping> mappings_;  // by host address
  mutable CommittedCount committed_;
};

}  // namespace

const Allocator& emulated_allocator() {
  // Never destroyed: tensors in static storage are freed through it at exit.
  static const EmulatedAllocator& kAllocator = *new EmulatedAllocator();
  return kAllocator;
}

}  // namespace maxctx::kernels::emulated

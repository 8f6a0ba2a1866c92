// stream.h: events over cudaEvent_t, and a small ring of pinned staging buffers.
#include <algorithm>
#include <array>
#include <cstring>
#include <memory>
#include <mutex>

#include "maxctx/kernels/cuda/cuda_check.h"
#include "maxctx/kernels/cuda/stream.h"

namespace maxctx::kernels::cuda {
namespace {

constexpr cudaStream_t kStream = nullptr;  // the legacy default stream (ops.h)

class CudaEvent final : public Event::Pending {
 public:
  CudaEvent() {
    MAXCTX_CUDA_CHECK(cudaEventCreateWithFlags(&event_, cudaEventDisableTiming));
    MAXCTX_CUDA_CHECK(cudaEventRecord(event_, kStream));
  }
  ~CudaEvent() override { cudaEventDestroy(event_); }  // at teardown the runtime may be gone
  CudaEvent(const CudaEvent&) = delete;
  CudaEvent& operator=(const CudaEvent&) = delete;
  void synchronize() override { MAXCTX_CUDA_CHECK(cudaEventSynchronize(event_)); }
  bool done() override {
    const cudaError_t status = cudaEventQuery(event_);
    if (status == cudaErrorNotReady) return false;
    MAXCTX_CUDA_CHECK(status);
    return true;
  }

 private:
  cudaEvent_t event_ = nullptr;
};

// One pinned buffer and the event after the last copy that used it.
struct StagingSlot {
  void* pinned = nullptr;
  size_t capacity = 0;
  cudaEvent_t last_use = nullptr;
};

// What a download's host function moves once the device copy into the slot has finished.
struct PendingDownload {
  void* host;
  const void* pinned;
  size_t bytes;
};

void CUDART_CB finish_download(void* data) {
  const std::unique_ptr<PendingDownload> download(static_cast<PendingDownload*>(data));
  std::memcpy(download->host, download->pinned, download->bytes);
}

// Four slots used in turn, so that a few copies can be in flight while the host goes on; a slot
// is reused once its last copy has finished. Kept for the process's lifetime (freeing pinned
// memory at exit would race the runtime's own teardown).
class StagingRing {
 public:
  // A slot of at least `bytes`, free of earlier copies; the caller holds the lock.
  StagingSlot& acquire(size_t bytes) {
    StagingSlot& slot = slots_[next_];
    next_ = (next_ + 1) % slots_.size();
    if (slot.last_use == nullptr) {
      MAXCTX_CUDA_CHECK(cudaEventCreateWithFlags(&slot.last_use, cudaEventDisableTiming));
    } else {
      MAXCTX_CUDA_CHECK(cudaEventSynchronize(slot.last_use));
    }
    if (slot.capacity < bytes) {
      if (slot.pinned != nullptr) MAXCTX_CUDA_CHECK(cudaFreeHost(slot.pinned));
      slot.pinned = nullptr;
      slot.capacity = 0;
      const size_t grown = std::max(bytes, size_t{64} << 10);
      MAXCTX_CUDA_CHECK(cudaHostAlloc(&slot.pinned, grown, cudaHostAllocDefault));
      slot.capacity = grown;
    }
    return slot;
  }
  std::mutex& mutex() { return mutex_; }

 private:
  std::array<StagingSlot, 4> slots_{};
  size_t next_ = 0;
  std::mutex mutex_;
};

StagingRing& staging() {
  static StagingRing& ring = *new StagingRing();
  return ring;
}

}  // namespace

Stream compute_stream() { return Stream(Device::kCuda, kStream); }

void synchronize_stream() { MAXCTX_CUDA_CHECK(cudaStreamSynchronize(kStream)); }

Event record_stream_event() { return Event(std::make_unique<CudaEvent>()); }

void copy_from_host_staged(void* device, const void* host, size_t bytes) {
  if (bytes == 0) return;
  if (bytes > kMaxStagedBytes) {
    MAXCTX_CUDA_CHECK(cudaMemcpy(device, host, bytes, cudaMemcpyHostToDevice));
    return;
  }
  StagingRing& ring = staging();
  const std::lock_guard lock(ring.mutex());
  StagingSlot& slot = ring.acquire(bytes);
  std::memcpy(slot.pinned, host, bytes);
  MAXCTX_CUDA_CHECK(cudaMemcpyAsync(device, slot.pinned, bytes, cudaMemcpyHostToDevice, kStream));
  MAXCTX_CUDA_CHECK(cudaEventRecord(slot.last_use, kStream));
}

Event copy_to_host_staged(void* host, const void* device, size_t bytes) {
  if (bytes == 0) return Event();
  if (bytes > kMaxStagedBytes) {
    MAXCTX_CUDA_CHECK(cudaMemcpy(host, device, bytes, cudaMemcpyDeviceToHost));
    return Event();
  }
  StagingRing& ring = staging();
  const std::lock_guard lock(ring.mutex());
  StagingSlot& slot = ring.acquire(bytes);
  MAXCTX_CUDA_CHECK(cudaMemcpyAsync(slot.pinned, device, bytes, cudaMemcpyDeviceToHost, kStream));
  auto download = std::make_unique<PendingDownload>(PendingDownload{host, slot.pinned, bytes});
  MAXCTX_CUDA_CHECK(cudaLaunchHostFunc(kStream, finish_download, download.get()));
  download.release();  // finish_download owns it now
  MAXCTX_CUDA_CHECK(cudaEventRecord(slot.last_use, kStream));
  return record_stream_event();
}

}  // namespace maxctx::kernels::cuda

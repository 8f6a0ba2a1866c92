// The queue a piece of work runs on (MLX's Stream): a backend's ops are issued to one, and a
// communicator's verbs on device memory take the one their data comes from and goes to, so a
// collective is ordered after the work issued before it and before the work issued after it.
//
// What it is not: an owner. It names a queue some backend made and keeps alive (the cuda
// backend's stream for the process's lifetime); copies are free. The host's stream (the default)
// is a backend's whose work is done when its call returns: the cpu backend, the emulated GPU,
// and every communicator verb on host memory.
#pragma once

#include "maxctx/core/device.h"

namespace maxctx {

class Stream {
 public:
  Stream() = default;  // the host's
  // A device's queue, as its backend spells it (CUDA: a cudaStream_t, nullptr being the legacy
  // default stream), opaque here so that no header above kernels/cuda names CUDA.
  Stream(Device device, void* queue) : device_(device), queue_(queue) {}

  Device device() const { return device_; }
  void* queue() const { return queue_; }
  bool on_host() const { return device_ == Device::kCpu; }

 private:
  Device device_ = Device::kCpu;
  void* queue_ = nullptr;
};

}  // namespace maxctx

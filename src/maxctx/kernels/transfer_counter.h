// The count a device backend keeps for Kernels::transfer_counts: each download (a synchronous
// one also waits) and each wait for the device. Thread-safe (a checkpoint writer may download
// while the step runs).
#pragma once

#include <atomic>
#include <cstdint>

#include "maxctx/kernels/types.h"

namespace maxctx::kernels {

class TransferCounter {
 public:
  void download(bool waits) {
    ++readbacks_;
    if (waits) ++host_waits_;
  }
  void wait() { ++host_waits_; }
  void offload() { ++offloads_; }
  TransferCounts read() const { return {readbacks_.load(), host_waits_.load(), offloads_.load()}; }

 private:
  std::atomic<int64_t> offloads_{0};
  std::atomic<int64_t> readbacks_{0};
  std::atomic<int64_t> host_waits_{0};
};

}  // namespace maxctx::kernels

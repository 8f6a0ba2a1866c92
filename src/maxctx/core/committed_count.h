// The count of committed bytes a device allocator keeps for Allocator::committed_bytes and
// reset_peak: what is committed now and the most since the last reset. Thread-safe.
#pragma once

#include <algorithm>
#include <cstdint>
#include <mutex>

#include "maxctx/core/device.h"

namespace maxctx {

class CommittedCount {
 public:
  // `bytes` committed (negative: handed back).
  void add(int64_t bytes) {
    const std::lock_guard lock(mutex_);
    now_ += bytes;
    peak_ = std::max(peak_, now_);
  }
  CommittedBytes read() const {
    const std::lock_guard lock(mutex_);
    return {now_, peak_};
  }
  void reset_peak() {
    const std::lock_guard lock(mutex_);
    peak_ = now_;
  }

 private:
  mutable std::mutex mutex_;
  int64_t now_ = 0, peak_ = 0;
};

}  // namespace maxctx

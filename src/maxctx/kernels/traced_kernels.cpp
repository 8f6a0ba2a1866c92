// One TracedKernels per backend (see traced_kernels.h), created on first use.
#include "maxctx/kernels/traced_kernels.h"

#include <map>
#include <memory>
#include <mutex>

namespace maxctx::kernels {

const Kernels& traced(const Kernels& inner) {
  static std::mutex mutex;
  static std::map<const Kernels*, std::unique_ptr<TracedKernels>> wrappers;
  const std::lock_guard lock(mutex);
  if (dynamic_cast<const TracedKernels*>(&inner) != nullptr) return inner;
  auto& wrapper = wrappers[&inner];
  if (!wrapper) wrapper = std::make_unique<TracedKernels>(inner);
  return *wrapper;
}

}  // namespace maxctx::kernels

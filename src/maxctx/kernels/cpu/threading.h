// How the cpu kernels split work between OpenMP threads: contiguous ranges, a static schedule,
// no reductions across threads (so results never depend on timing).
//
// Internal to kernels/cpu. A body must not throw: inputs are validated before the loop. A call
// with too little work for two tasks runs inline, without forking a team.
#pragma once

#include <algorithm>
#include <cstdint>

namespace maxctx::kernels::cpu {

// About 128 KiB of floats per task: enough to amortize the fork and join of an OpenMP team.
inline constexpr int64_t kMinElementsPerTask = int64_t{1} << 15;

// Items per task when one item (a row) holds item_elements elements.
inline int64_t items_per_task(int64_t item_elements) {
  return std::max<int64_t>(1, kMinElementsPerTask / std::max<int64_t>(1, item_elements));
}

// Calls body(begin, end) on contiguous ranges covering [0, n), each at most grain long.
template <typename Body>
void parallel_for(int64_t n, int64_t grain, const Body& body) {
  if (n <= 0) return;
  grain = std::max<int64_t>(1, grain);
  const int64_t tasks = (n + grain - 1) / grain;
  if (tasks == 1) {
    body(int64_t{0}, n);
    return;
  }
#pragma omp parallel for schedule(static)
  for (int64_t t = 0; t < tasks; ++t) body(t * grain, std::min(n, (t + 1) * grain));
}

}  // namespace maxctx::kernels::cpu

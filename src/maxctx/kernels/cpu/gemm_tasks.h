// How the Goto-style GEMM drivers (sgemm.cpp, gemm_bf16.cpp) share one K block's work between
// the threads of a team: tasks are (M block, range of B micro-panels) pairs, m_blocks × n_splits
// of them, and thread `index` of `count` takes a contiguous share. Shares move whole tiles of C
// between threads and never split K, so no value depends on the thread count.
#pragma once

#include <algorithm>
#include <cstdint>

namespace maxctx::kernels::cpu {

// Where share `index` of `count` equal contiguous shares of [0, total) begins.
inline int64_t gemm_share(int64_t total, int64_t index, int64_t count) {
  return total * index / count;
}

// Calls task(block, first_panel, end_panel) for each non-empty task of thread `index`, blocks in
// increasing order (so a thread packs each of its A blocks once per K block).
template <typename Task>
void for_each_gemm_task(int64_t m_blocks, int64_t n_splits, int64_t panels, int64_t index,
                        int64_t count, Task&& task) {
  const int64_t panels_per_split = (panels + n_splits - 1) / n_splits;
  const int64_t tasks = m_blocks * n_splits;
  for (int64_t t = gemm_share(tasks, index, count); t < gemm_share(tasks, index + 1, count); ++t) {
    const int64_t q_begin = t % n_splits * panels_per_split;
    const int64_t q_end = std::min(panels, q_begin + panels_per_split);
    if (q_begin < q_end) task(t / n_splits, q_begin, q_end);
  }
}

}  // namespace maxctx::kernels::cpu

#include "maxctx/kernels/cpu/readouts.h"

#include <algorithm>
#include <span>
#include <vector>

#include "maxctx/core/arg_max.h"
#include "maxctx/kernels/cpu/threading.h"

namespace maxctx::kernels::cpu {

double sum_in_order(const float* x, int64_t n) {
  double sum = 0.0;
  for (int64_t i = 0; i < n; ++i) sum += x[i];
  return sum;
}

double sum_of_squares_in_order(FloatPtr x, int64_t n) {
  double sum = 0.0;
  for (int64_t i = 0; i < n; ++i) {
    const double v = x.load(i);
    sum += v * v;
  }
  return sum;
}

int64_t count_arg_max_hits(const float* logits, const int32_t* targets, const float* weights,
                           int64_t n, int64_t vocab) {
  // A flag per row, counted after the parallel loop: the count is exact in any order.
  std::vector<unsigned char> hit(static_cast<size_t>(n), 0);
  parallel_for(n, items_per_task(vocab), [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      if (weights[i] == 0.0f) continue;
      const std::span<const float> row(logits + i * vocab, static_cast<size_t>(vocab));
      hit[static_cast<size_t>(i)] = first_arg_max(row) == targets[i] ? 1 : 0;
    }
  });
  return std::count(hit.begin(), hit.end(), 1);
}

void arg_max_rows(int32_t* ids, const float* logits, int64_t n, int64_t vocab) {
  parallel_for(n, items_per_task(vocab), [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      const std::span<const float> row(logits + i * vocab, static_cast<size_t>(vocab));
      ids[i] = static_cast<int32_t>(first_arg_max(row));
    }
  });
}

void scale_by_ratio(FloatPtr x, int64_t n, float divisor, float multiplier) {
  parallel_for(n, items_per_task(1), [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) x.store(i, (x.load(i) / divisor) * multiplier);
  });
}

}  // namespace maxctx::kernels::cpu

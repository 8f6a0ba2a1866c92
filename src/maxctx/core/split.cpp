#include "maxctx/core/split.h"

#include <algorithm>

#include "maxctx/core/check.h"

namespace maxctx {

int64_t split_count(int64_t total, int parts, int part) {
  MAXCTX_CHECK(parts >= 1 && part >= 0 && part < parts, "block {} of {}", part, parts);
  MAXCTX_CHECK_GE(total, 0, "a split of a negative count");
  return total / parts + (part < total % parts ? 1 : 0);
}

int64_t split_offset(int64_t total, int parts, int part) {
  MAXCTX_CHECK(parts >= 1 && part >= 0 && part <= parts, "offset of block {} of {}", part, parts);
  MAXCTX_CHECK_GE(total, 0, "a split of a negative count");
  return part * (total / parts) + std::min<int64_t>(part, total % parts);
}

std::vector<int64_t> split_counts(int64_t total, int parts) {
  std::vector<int64_t> counts(parts);
  for (int p = 0; p < parts; ++p) counts[p] = split_count(total, parts, p);
  return counts;
}

}  // namespace maxctx

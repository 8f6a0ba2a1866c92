// A mixture of experts' routed rows go where the router sends them: a rank's all-to-all bytes
// vary, their total over the ranks does not. The plans count each rank at the mean; tests compare
// the engine's counts with their all-to-all bytes replaced by that mean (collective over `group`).
#pragma once

#include <gtest/gtest.h>

#include "maxctx/mesh/communicator.h"
#include "maxctx/mesh/traffic.h"

namespace maxctx::testing {

inline Traffic with_mean_all_to_all(const Traffic& counted, const Communicator& group) {
  Traffic out;
  for (const auto& [axis, counts] : counted.axes()) {
    for (int kind = 0; kind < kNumCollectiveKinds; ++kind) {
      TrafficCount count = counts[static_cast<size_t>(kind)];
      if (static_cast<CollectiveKind>(kind) == CollectiveKind::kAllToAll) {
        group.all_reduce(std::span<int64_t>(&count.bytes, 1), ReduceOp::kSum);
        EXPECT_EQ(count.bytes % group.size(), 0) << "routed rows split unevenly";
        count.bytes /= group.size();
      }
      if (count.calls == 0) continue;
      // add() repeats bytes per call: the total once, then the other calls with none.
      out.add(axis, static_cast<CollectiveKind>(kind), count.bytes);
      out.add(axis, static_cast<CollectiveKind>(kind), 0, count.calls - 1);
    }
  }
  return out;
}

}  // namespace maxctx::testing

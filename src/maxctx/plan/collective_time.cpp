#include "maxctx/plan/collective_time.h"

#include "maxctx/core/check.h"

namespace maxctx::plan {

double communication_seconds(const Traffic& traffic, const std::map<std::string, GroupLink>& groups,
                             const HardwareProfile& profile) {
  double seconds = 0;
  for (const auto& [axis, counts] : traffic.axes()) {
    const auto it = groups.find(axis);
    MAXCTX_CHECK(it != groups.end(), "traffic on axis '{}' that the plan has no group for", axis);
    const auto n = static_cast<double>(it->second.ranks);
    const LinkSpeed& link = it->second.dcn ? profile.dcn : profile.ici;
    for (int k = 0; k < kNumCollectiveKinds; ++k) {
      const TrafficCount& count = counts[static_cast<size_t>(k)];
      if (count.calls == 0) continue;
      const auto bytes = static_cast<double>(count.bytes);
      // Bytes each rank sends: a ring all-gather / reduce-scatter sends (n-1)/n of the full
      // buffer, an all-reduce twice that; send_recv records sent + received.
      double sent = 0;
      switch (static_cast<CollectiveKind>(k)) {
        case CollectiveKind::kAllGather:
        case CollectiveKind::kReduceScatter:
        case CollectiveKind::kAllToAll:
          sent = bytes * (n - 1) / n;
          break;
        case CollectiveKind::kAllReduce:
          sent = 2 * bytes * (n - 1) / n;
          break;
        case CollectiveKind::kSendRecv:
          sent = bytes / 2;
          break;
        case CollectiveKind::kBroadcast:
        case CollectiveKind::kIsend:
          sent = bytes;
          break;
        case CollectiveKind::kIrecv:
          continue;
      }
      seconds += sent / link.bandwidth + static_cast<double>(count.calls) * link.latency;
    }
  }
  return seconds;
}

}  // namespace maxctx::plan

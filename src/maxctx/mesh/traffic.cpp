#include "maxctx/mesh/traffic.h"

#include <fmt/format.h>

#include <mutex>

namespace maxctx {
namespace {

std::mutex g_mutex;
Traffic g_counted;  // guarded by g_mutex

}  // namespace

std::string_view collective_kind_name(CollectiveKind kind) {
  switch (kind) {
    case CollectiveKind::kAllGather:
      return "all_gather";
    case CollectiveKind::kReduceScatter:
      return "reduce_scatter";
    case CollectiveKind::kAllReduce:
      return "all_reduce";
    case CollectiveKind::kAllToAll:
      return "all_to_all";
    case CollectiveKind::kBroadcast:
      return "broadcast";
    case CollectiveKind::kSendRecv:
      return "send_recv";
    case CollectiveKind::kIsend:
      return "isend";
    case CollectiveKind::kIrecv:
      return "irecv";
  }
  return "?";
}

void Traffic::add(std::string_view axis, CollectiveKind kind, int64_t bytes, int64_t calls) {
  // A group of one rank ("self", mesh.h group_trace_name) moves nothing and is not counted.
  if (calls == 0 || axis == "self") return;
  auto it = axes_.find(axis);
  if (it == axes_.end()) it = axes_.emplace(std::string(axis), Counts{}).first;
  TrafficCount& c = it->second[static_cast<int>(kind)];
  c.calls += calls;
  c.bytes += bytes * calls;
}

void Traffic::add(const Traffic& other, int64_t times) {
  for (const auto& [axis, counts] : other.axes_) {
    for (int k = 0; k < kNumCollectiveKinds; ++k) {
      if (counts[k].calls == 0) continue;
      auto it = axes_.find(axis);
      if (it == axes_.end()) it = axes_.emplace(axis, Counts{}).first;
      it->second[k].calls += counts[k].calls * times;
      it->second[k].bytes += counts[k].bytes * times;
    }
  }
}

TrafficCount Traffic::total(std::string_view axis) const {
  TrafficCount sum;
  const auto it = axes_.find(axis);
  if (it == axes_.end()) return sum;
  for (const TrafficCount& c : it->second) {
    sum.calls += c.calls;
    sum.bytes += c.bytes;
  }
  return sum;
}

Traffic counted_traffic() {
  const std::lock_guard<std::mutex> lock(g_mutex);
  return g_counted;
}

void reset_counted_traffic() {
  const std::lock_guard<std::mutex> lock(g_mutex);
  g_counted = Traffic();
}

void count_traffic(const char* axis, int ranks, CollectiveKind kind, int64_t bytes) {
  if (ranks <= 1) return;
  const std::lock_guard<std::mutex> lock(g_mutex);
  g_counted.add(axis, kind, bytes);
}

std::string format_traffic(const Traffic& traffic) {
  std::string text;
  for (const auto& [axis, counts] : traffic.axes()) {
    text += fmt::format("{}:", axis);
    for (int k = 0; k < kNumCollectiveKinds; ++k) {
      if (counts[k].calls == 0) continue;
      text += fmt::format(" {} {} calls {} bytes;",
                          collective_kind_name(static_cast<CollectiveKind>(k)), counts[k].calls,
                          counts[k].bytes);
    }
    text += "\n";
  }
  return text;
}

}  // namespace maxctx

// Traffic: what a run sends, per mesh axis and kind of collective (calls and bytes), counted by
// the communicator on every verb (always on: a map update per call, next to a message) and
// declared beforehand by `maxctx plan` from the functions beside each sender (parallel/), so a
// test can hold the two equal.
//
// Bytes are the size of the buffer the verb moves, as its trace span records it: all_gather the
// gathered output, reduce_scatter, all_reduce and all_to_all their input, broadcast its data,
// send_recv what is sent plus what is received, isend/irecv the message. Communicators of one
// rank move nothing and are not counted. The axis is the communicator's trace name ("context",
// "data,context", ...).
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <string>
#include <string_view>

namespace maxctx {

enum class CollectiveKind {
  kAllGather,
  kReduceScatter,
  kAllReduce,
  kAllToAll,
  kBroadcast,
  kSendRecv,
  kIsend,
  kIrecv,
};
inline constexpr int kNumCollectiveKinds = 8;
std::string_view collective_kind_name(CollectiveKind kind);  // "all_gather", ...

struct TrafficCount {
  int64_t calls = 0;
  int64_t bytes = 0;
  bool operator==(const TrafficCount&) const = default;
};

// Per axis name, one count per CollectiveKind (indexed by its value).
class Traffic {
 public:
  using Counts = std::array<TrafficCount, kNumCollectiveKinds>;

  void add(std::string_view axis, CollectiveKind kind, int64_t bytes, int64_t calls = 1);
  void add(const Traffic& other, int64_t times = 1);  // other's counts `times` over
  const std::map<std::string, Counts, std::less<>>& axes() const { return axes_; }
  TrafficCount total(std::string_view axis) const;  // every kind on one axis
  bool operator==(const Traffic&) const = default;

 private:
  std::map<std::string, Counts, std::less<>> axes_;
};

// What this process's communicators have moved since the last reset (every thread; locked).
Traffic counted_traffic();
void reset_counted_traffic();
// Called by the Communicator's verbs; `ranks` is the communicator's size (1: not counted).
void count_traffic(const char* axis, int ranks, CollectiveKind kind, int64_t bytes);

// "context: all_gather 4 calls 1.0 MiB, ..." one line per axis, for messages and test output.
std::string format_traffic(const Traffic& traffic);

}  // namespace maxctx

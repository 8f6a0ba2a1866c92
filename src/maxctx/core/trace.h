// Timeline tracing: RAII spans recorded into per-thread buffers, written as Chrome trace-event
// JSON (loadable in Perfetto and chrome://tracing) by mesh/trace_file.h, one process per rank.
//
// What it is: the one interface every layer (kernels, communicator, attention plans, trainer,
// inference, a GPU backend) uses to say "this named piece of work ran from t0 to t1". Spans
// carry a category (compute, comm, io, optimizer, data, step) and two optional arguments: a
// `detail` string (the mesh axis of a collective, the layer) and a `value` (bytes moved).
// What it is not: a sampler or a metric store; nothing is aggregated here (report/ summarises).
//
// Invariants: off by default; when off a span costs one relaxed load and a predictable branch
// (checked by bench/trace). Built with -DMAXCTX_TRACE=OFF, Span is empty and enabled() is a
// constant false. `name` and `detail` must outlive the trace: string literals, or intern().
// Timestamps are steady_clock nanoseconds; spans nest on a thread by time (a child closes
// before its parent), which the writer relies on only to order events, not to build a tree.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <string_view>
#include <vector>

#ifndef MAXCTX_TRACE
#define MAXCTX_TRACE 1
#endif

namespace maxctx::trace {

// "step", "layer" and "optimizer" are containers (other spans nest inside them); compute, comm,
// io and data are the leaves the summary adds up.
enum class Category : uint8_t { kCompute, kComm, kIo, kOptimizer, kData, kStep, kLayer };
const char* category_name(Category category);  // "compute", "comm", ...

// Tracks (Chrome's tid) of one rank: the calling thread's own work, and transfers in flight
// (isend/irecv from post to completion), which overlap whatever the thread does meanwhile.
inline constexpr int kMainTrack = 0;
inline constexpr int kAsyncTrack = 1;

struct Event {
  const char* name = "";
  const char* detail = nullptr;  // optional argument: the axis, the layer
  int64_t value = -1;            // optional argument: bytes; -1 means none
  int64_t begin_ns = 0;          // steady_clock
  int64_t end_ns = 0;
  Category category = Category::kCompute;
  uint8_t track = kMainTrack;
};

#if MAXCTX_TRACE
extern std::atomic<bool> g_enabled;
inline bool enabled() { return g_enabled.load(std::memory_order_relaxed); }
#else
constexpr bool enabled() { return false; }
#endif

inline int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// Starts recording (clears every buffer; `origin_ns` becomes time zero in the written trace) and
// stops it. Not thread-safe against spans running on other threads while they switch.
void start(int64_t origin_ns);
void stop();
int64_t origin_ns();

// Appends one finished event to this thread's buffer (what Span's destructor calls; a backend
// with its own clock, a GPU's event timer, records converted spans through it).
void record(const Event& event);

// Every event recorded since start(), all threads, sorted by begin time (ties: longer first, so
// a parent precedes the children that start with it).
std::vector<Event> collect();

// A stable copy of `text` (for names built at run time, such as a communicator's axis list).
const char* intern(std::string_view text);
// intern("<prefix> <n>"), e.g. numbered("layer", 3) = "layer 3"; call it only while enabled().
const char* numbered(const char* prefix, int64_t n);

#if MAXCTX_TRACE
class Span {
 public:
  Span(const char* name, Category category, const char* detail = nullptr, int64_t value = -1) {
    if (enabled()) [[unlikely]] {
      event_.name = name;
      event_.category = category;
      event_.detail = detail;
      event_.value = value;
      event_.begin_ns = now_ns();
      active_ = true;
    }
  }
  ~Span() { finish(); }
  // Ends the span now rather than at the end of its scope.
  void finish() {
    if (active_) [[unlikely]] {
      event_.end_ns = now_ns();
      record(event_);
      active_ = false;
    }
  }
  Span(const Span&) = delete;
  Span& operator=(const Span&) = delete;

 private:
  Event event_;
  bool active_ = false;
};
#else
class Span {
 public:
  Span(const char*, Category, const char* = nullptr, int64_t = -1) {}
  void finish() {}
};
#endif

}  // namespace maxctx::trace

// Trace buffers (see trace.h): one vector of events per thread, owned by a registry so that a
// thread's events outlive the thread, and cleared together when a trace starts.
#include "maxctx/core/trace.h"

#include <algorithm>
#include <deque>
#include <memory>
#include <mutex>
#include <string>

namespace maxctx::trace {
namespace {

// Enough for a profiled window of a few steps without reallocating inside a timed span.
constexpr size_t kReservedEvents = size_t{1} << 15;

struct Registry {
  std::mutex mutex;
  std::deque<std::unique_ptr<std::vector<Event>>> buffers;
  std::deque<std::string> interned;
  int64_t origin_ns = 0;
};

Registry& registry() {
  static Registry* r = new Registry();  // never destroyed: threads may record during exit
  return *r;
}

std::vector<Event>& this_thread_buffer() {
  thread_local std::vector<Event>* buffer = [] {
    Registry& r = registry();
    const std::lock_guard lock(r.mutex);
    r.buffers.push_back(std::make_unique<std::vector<Event>>());
    r.buffers.back()->reserve(kReservedEvents);
    return r.buffers.back().get();
  }();
  return *buffer;
}

}  // namespace

#if MAXCTX_TRACE
std::atomic<bool> g_enabled{false};
#endif

const char* category_name(Category category) {
  switch (category) {
    case Category::kCompute:
      return "compute";
    case Category::kComm:
      return "comm";
    case Category::kIo:
      return "io";
    case Category::kOptimizer:
      return "optimizer";
    case Category::kData:
      return "data";
    case Category::kStep:
      return "step";
    case Category::kLayer:
      return "layer";
  }
  return "unknown";
}

void start(int64_t origin) {
  Registry& r = registry();
  {
    const std::lock_guard lock(r.mutex);
    for (auto& buffer : r.buffers) buffer->clear();
    r.origin_ns = origin;
  }
#if MAXCTX_TRACE
  g_enabled.store(true, std::memory_order_relaxed);
#endif
}

void stop() {
#if MAXCTX_TRACE
  g_enabled.store(false, std::memory_order_relaxed);
#endif
}

int64_t origin_ns() { return registry().origin_ns; }

void record(const Event& event) { this_thread_buffer().push_back(event); }

std::vector<Event> collect() {
  Registry& r = registry();
  std::vector<Event> events;
  {
    const std::lock_guard lock(r.mutex);
    for (const auto& buffer : r.buffers)
      events.insert(events.end(), buffer->begin(), buffer->end());
  }
  std::stable_sort(events.begin(), events.end(), [](const Event& a, const Event& b) {
    if (a.begin_ns != b.begin_ns) return a.begin_ns < b.begin_ns;
    return a.end_ns > b.end_ns;
  });
  return events;
}

const char* intern(std::string_view text) {
  Registry& r = registry();
  const std::lock_guard lock(r.mutex);
  for (const std::string& s : r.interned) {
    if (s == text) return s.c_str();
  }
  r.interned.emplace_back(text);
  return r.interned.back().c_str();
}

const char* numbered(const char* prefix, int64_t n) {
  return intern(std::string(prefix) + " " + std::to_string(n));
}

}  // namespace maxctx::trace

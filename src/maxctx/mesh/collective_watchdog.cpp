#include "maxctx/mesh/collective_watchdog.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <mutex>
#include <thread>

#include "maxctx/core/check.h"
#include "maxctx/core/log.h"
#include "maxctx/mesh/communicator_impl.h"

namespace maxctx {
namespace {

using Clock = std::chrono::steady_clock;

// The one watched thread's record (MPI is FUNNELED: only the main thread calls it).
struct Waiting {
  std::atomic<const char*> verb{nullptr};
  std::atomic<const CommunicatorImpl*> comm{nullptr};
  std::atomic<int64_t> since_ns{0};
};
Waiting g_waiting;
std::atomic<bool> g_watching{false};  // off: WaitScope touches nothing but this flag
std::atomic<double> g_timeout{0};     // what heartbeat_seconds() derives from

class Watchdog {
 public:
  ~Watchdog() { stop(); }

  void set_timeout(double seconds) {
    stop();
    std::lock_guard lock(mutex_);
    timeout_ = seconds;
    g_timeout.store(std::max(seconds, 0.0), std::memory_order_relaxed);
    g_watching.store(seconds > 0, std::memory_order_relaxed);
    if (seconds <= 0) return;
    stopping_ = false;
    thread_ = std::thread([this] { watch(); });
  }

  void stop() {
    g_watching.store(false, std::memory_order_relaxed);
    {
      std::lock_guard lock(mutex_);
      if (!thread_.joinable()) return;
      stopping_ = true;
    }
    wake_.notify_all();
    thread_.join();
  }

 private:
  void watch() {
    std::unique_lock lock(mutex_);
    const auto poll = std::chrono::milliseconds(
        std::clamp<int64_t>(static_cast<int64_t>(timeout_ * 1000 / 4), 10, 500));
    while (!wake_.wait_for(lock, poll, [this] { return stopping_; })) {
      const char* verb = g_waiting.verb.load(std::memory_order_relaxed);
      if (verb == nullptr) continue;
      const int64_t since = g_waiting.since_ns.load(std::memory_order_relaxed);
      const double waited =
          static_cast<double>(Clock::now().time_since_epoch().count() - since) * 1e-9;
      if (waited <= timeout_) continue;
      const CommunicatorImpl* comm = g_waiting.comm.load(std::memory_order_relaxed);
      const std::string message = fmt::format(
          "collective {} over {} ({} ranks) has waited {:.1f} s, more than "
          "collective_timeout_seconds = {}: a peer rank has stopped or is stuck; ending the job",
          verb, comm != nullptr ? comm->label() : std::string("a point-to-point exchange"),
          comm != nullptr ? comm->size() : 0, waited, timeout_);
      // The other waiting ranks reach their own verdict within a poll or two: give them the time
      // to print theirs before this rank's MPI_Abort ends them.
      std::fprintf(stderr, "maxctx: error: [rank %d] %s\n", log::rank(), message.c_str());
      std::fflush(stderr);
      lock.unlock();
      std::this_thread::sleep_for(std::chrono::seconds(2));
      end_job();
    }
  }

  std::mutex mutex_;
  std::condition_variable wake_;
  std::thread thread_;
  double timeout_ = 0;
  bool stopping_ = false;
};

Watchdog& watchdog() {
  static Watchdog instance;
  return instance;
}

}  // namespace

void set_collective_timeout(double seconds) { watchdog().set_timeout(seconds); }
void stop_collective_watchdog() { watchdog().stop(); }

double heartbeat_seconds() {
  const double timeout = g_timeout.load(std::memory_order_relaxed);
  return timeout > 0 ? std::clamp(timeout / 4, 0.01, 10.0) : 10.0;
}

WaitScope::WaitScope(const char* verb, const CommunicatorImpl* comm) {
  if (!g_watching.load(std::memory_order_relaxed)) return;
  if (g_waiting.verb.load(std::memory_order_relaxed) != nullptr) return;
  outermost_ = true;
  g_waiting.since_ns.store(Clock::now().time_since_epoch().count(), std::memory_order_relaxed);
  g_waiting.comm.store(comm, std::memory_order_relaxed);
  g_waiting.verb.store(verb, std::memory_order_release);
}

WaitScope::~WaitScope() {
  if (outermost_) g_waiting.verb.store(nullptr, std::memory_order_release);
}

}  // namespace maxctx

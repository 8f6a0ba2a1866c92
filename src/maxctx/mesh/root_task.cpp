// run_on_root / run_on_every_rank (see root_task.h). run_on_root's task runs on a thread of its
// own while the calling thread, the one that talks MPI, sends the waiting ranks a heartbeat every
// heartbeat_seconds() in which the process noted progress (core/progress.h): a waiting rank's
// watchdog then measures each heartbeat's wait, not the whole task, and only a rank that stops
// making progress trips it (issue #34 N3). A task that ends within the first interval costs the
// same one broadcast as before. A root task must therefore not call MPI or use the device (it
// is host work: files, logs).
#include "maxctx/mesh/root_task.h"

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <limits>
#include <mutex>
#include <string>
#include <thread>

#include "maxctx/core/check.h"
#include "maxctx/core/progress.h"
#include "maxctx/mesh/collective_watchdog.h"

namespace maxctx {
namespace {

// What rank 0 broadcasts while it still works: a heartbeat, not an outcome.
constexpr int64_t kWorking = std::numeric_limits<int64_t>::max();

// The error `task` throws, or "" where it succeeds.
std::string error_of(const std::function<void()>& task) {
  try {
    task();
  } catch (const std::exception& e) {
    return e.what()[0] != '\0' ? e.what() : "unknown error";
  }
  return {};
}

// `task` on a thread of its own; the constructor starts it, the destructor joins it.
class WorkerTask {
 public:
  explicit WorkerTask(const std::function<void()>& task)
      : thread_([this, &task] {
          std::string error = error_of(task);
          {
            std::lock_guard lock(mutex_);
            error_ = std::move(error);
            done_ = true;
          }
          ended_.notify_all();
        }) {}
  ~WorkerTask() { thread_.join(); }
  WorkerTask(const WorkerTask&) = delete;
  WorkerTask& operator=(const WorkerTask&) = delete;

  // Waits up to `seconds` for the task to end; true once it has.
  bool wait(double seconds) {
    std::unique_lock lock(mutex_);
    return ended_.wait_for(lock, std::chrono::duration<double>(seconds), [this] { return done_; });
  }
  // The task's error ("": none); only once wait() said it ended.
  const std::string& error() const { return error_; }

 private:
  std::mutex mutex_;
  std::condition_variable ended_;
  bool done_ = false;
  std::string error_;
  std::thread thread_;  // last: started once the members above exist
};

}  // namespace

void run_on_root(const Communicator& comm, const std::function<void()>& task) {
  std::string message;
  // The outcome (0 ok, 1 failed, kWorking: a heartbeat), then the message size.
  int64_t header[2] = {kWorking, 0};
  if (comm.rank() == 0 && comm.size() == 1) {
    message = error_of(task);
  } else if (comm.rank() == 0) {
    WorkerTask worker(task);
    ProgressSince progress;
    while (!worker.wait(heartbeat_seconds())) {
      if (progress.advanced()) comm.broadcast(std::span<int64_t>(header, 2), 0);
    }
    message = worker.error();
  }
  if (comm.rank() == 0) {
    header[0] = message.empty() ? 0 : 1;
    header[1] = static_cast<int64_t>(message.size());
  }
  do {
    comm.broadcast(std::span<int64_t>(header, 2), 0);
  } while (header[0] == kWorking);
  if (header[0] == 0) return;
  message.resize(static_cast<size_t>(header[1]));
  comm.broadcast(std::span<uint8_t>(reinterpret_cast<uint8_t*>(message.data()), message.size()), 0);
  fail("{}", message);
}

void agree_on_errors(const Communicator& comm, const std::string& error) {
  // The lowest failing rank (+1; 0: none), as a maximum over negated ranks.
  int64_t failed = error.empty() ? std::numeric_limits<int64_t>::min() : -comm.rank();
  comm.all_reduce(std::span<int64_t>(&failed, 1), ReduceOp::kMax);
  if (failed == std::numeric_limits<int64_t>::min()) return;
  const int root = static_cast<int>(-failed);
  std::string message = comm.rank() == root ? error : std::string();
  int64_t size = static_cast<int64_t>(message.size());
  comm.broadcast(std::span<int64_t>(&size, 1), root);
  message.resize(static_cast<size_t>(size));
  comm.broadcast(std::span<uint8_t>(reinterpret_cast<uint8_t*>(message.data()), message.size()),
                 root);
  fail("rank {}: {}", root, message);
}

// Inline, without heartbeats: every rank works (each on its own files), so none waits for long,
// and the task may use this thread's device.
void run_on_every_rank(const Communicator& comm, const std::function<void()>& task) {
  agree_on_errors(comm, error_of(task));
}

}  // namespace maxctx

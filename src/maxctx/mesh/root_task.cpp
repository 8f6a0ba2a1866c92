#include "maxctx/mesh/root_task.h"

#include <cstdint>
#include <exception>
#include <limits>
#include <string>

#include "maxctx/core/check.h"

namespace maxctx {

void run_on_root(const Communicator& comm, const std::function<void()>& task) {
  std::string message;
  int64_t failed = 0;
  if (comm.rank() == 0) {
    try {
      task();
    } catch (const std::exception& e) {
      message = e.what();
      failed = 1;
    }
  }
  // The outcome, then the message when there is one.
  int64_t header[2] = {failed, static_cast<int64_t>(message.size())};
  comm.broadcast(std::span<int64_t>(header, 2), 0);
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

void run_on_every_rank(const Communicator& comm, const std::function<void()>& task) {
  std::string error;
  try {
    task();
  } catch (const std::exception& e) {
    error = e.what();
    if (error.empty()) error = "unknown error";
  }
  agree_on_errors(comm, error);
}

}  // namespace maxctx

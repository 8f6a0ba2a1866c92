#include "maxctx/mesh/root_task.h"

#include <cstdint>
#include <exception>
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

}  // namespace maxctx

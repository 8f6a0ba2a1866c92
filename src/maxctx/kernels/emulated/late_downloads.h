// The emulated GPU's asynchronous downloads (Kernels::copy_to_host_async), made as late as a GPU
// may make them: the bytes are taken when the copy is issued (the emulated GPU's ops have all
// finished by then, so they are the bytes a GPU would copy) and written into the caller's memory
// only when a GPU guarantees them: at the synchronize() of the download's event or of a later
// event, or at the backend's synchronize(). A caller that reads the host memory before that reads
// what was there before, on the emulated GPU as on a real one, and CI sees it.
//
// What it is not: a model of timing. An event is done() exactly when it has been synchronized.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "maxctx/kernels/event.h"

namespace maxctx::kernels::emulated {

class LateDownloads {
 public:
  // Queues host = bytes of `source` (host memory: the caller has undisguised it), to be written at
  // the returned event's synchronize() at the latest.
  Event download(void* host, const void* source, size_t bytes);
  // An event after every download queued so far.
  Event mark();
  // Writes every download queued so far.
  void deliver_all();

 private:
  struct Download {
    uint64_t sequence;
    void* host;
    std::vector<std::byte> bytes;
  };
  class Pending;

  // Writes the downloads queued up to `sequence`, in order.
  void deliver_through(uint64_t sequence);
  bool delivered_through(uint64_t sequence);

  std::mutex mutex_;
  uint64_t issued_ = 0;
  std::vector<Download> queued_;  // in issue order
};

}  // namespace maxctx::kernels::emulated

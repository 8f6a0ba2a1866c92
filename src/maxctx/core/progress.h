// A process-wide count of work done, fed by the long loops that one rank may run alone while the
// others wait for it in a collective (issue #34 N3): tokenizing a corpus (per document) and
// writing a file (per chunk). The waiting side (mesh/root_task.h, the checkpoint saver) sends a
// heartbeat to the waiting ranks only when the count moved since the last one, so a rank that is
// slow keeps its peers' watchdog quiet and a rank that is stuck (no progress for longer than
// collective_timeout_seconds) still trips it.
//
// What it is not: a measure of how much is left. It counts any thread's progress, so a background
// checkpoint writer's chunks count while the main work waits; that only delays a verdict on a
// stuck rank until the writer is done too.
#pragma once

#include <cstdint>

namespace maxctx {

void note_progress();
uint64_t progress_count();

// Whether the process noted progress since the last call (the first: since construction).
class ProgressSince {
 public:
  bool advanced() {
    const uint64_t now = progress_count();
    const bool moved = now != seen_;
    seen_ = now;
    return moved;
  }

 private:
  uint64_t seen_ = progress_count();
};

}  // namespace maxctx

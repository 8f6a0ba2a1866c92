// Work only one rank does (the files rank 0 alone writes: metrics, checkpoints, a benchmark's
// log) with a collective outcome, so that a failure there cannot leave the other ranks waiting
// in their next collective for a rank that has given up (issue #21's hang: disk full at a
// checkpoint, an unopenable metrics file).
#pragma once

#include <cstdint>
#include <functional>

#include "maxctx/mesh/communicator.h"

namespace maxctx {

// Collective over `comm`: its rank 0 runs `task`; if that throws (any std::exception), every
// rank throws maxctx::Error with rank 0's message, else every rank returns. The other ranks wait
// for rank 0's outcome, as a barrier would. With more than one rank the task runs on a thread of
// its own while rank 0 heartbeats the waiting ranks as long as the process notes progress
// (core/progress.h), so a long task is not taken for a stuck rank: it must be host work that
// calls no MPI and does not use the device.
void run_on_root(const Communicator& comm, const std::function<void()>& task);

// Collective over `comm`: every rank runs `task`; if it throws on any rank, every rank throws
// maxctx::Error with the message of the lowest failing rank, prefixed "rank R: " (so rank 0,
// which prints, names it), else every rank returns. Work every rank does on its own files (a
// checkpoint's shards), whose failure on one rank must not leave the others waiting.
void run_on_every_rank(const Communicator& comm, const std::function<void()>& task);
// The same outcome for a failure already caught: `error` empty where this rank succeeded.
void agree_on_errors(const Communicator& comm, const std::string& error);

// What a successful run_on_root sends: one broadcast of the outcome (failed, message size).
inline constexpr int64_t kRootTaskBroadcastBytes = 2 * sizeof(int64_t);

}  // namespace maxctx

// Fault injection for the reliability tests: MAXCTX_FAULT="rank=R,step=K,kind=KIND" makes rank R
// fail at training step K (0-based, as the step lines print it) in one of these ways:
//   write       rank R's part of the checkpoint of step K fails once its file is written (an
//               I/O error mid-checkpoint);
//   alloc       an allocation fails (std::bad_alloc) as step K begins;
//   collective  the rank stops before step K's first collective (sleeps, as a stopped or
//               hung process would), leaving its peers waiting: the collective watchdog's case;
//   kill        the rank dies (SIGKILL) as step K begins;
//   kill_save_start, kill_save_writing, kill_save_written, kill_save_commit: the rank dies
//               during the checkpoint save of step K: before it writes anything, halfway
//               through its file, once its file is complete, or (rank 0) with index.json
//               written but the checkpoint not yet renamed into place.
// The variable is read in this one place, once; a malformed value is a maxctx::Error. Unset (the
// normal case), every injection point is one branch on a cached null.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace maxctx {

enum class FaultKind {
  kWrite,
  kAlloc,
  kCollective,
  kKill,
  kKillSaveStart,
  kKillSaveWriting,
  kKillSaveWritten,
  kKillSaveCommit
};

struct FaultPlan {
  int rank = 0;
  int64_t step = 0;
  FaultKind kind = FaultKind::kWrite;
};

// Parses "rank=R,step=K,kind=KIND" (any order); throws maxctx::Error naming what is wrong.
FaultPlan parse_fault_plan(const std::string& text);

// The plan of $MAXCTX_FAULT, parsed on first use; nullopt when it is unset or empty.
const std::optional<FaultPlan>& fault_plan();

// At an injection point of `kind` on this rank (log::rank()) at `step`: strikes if the plan
// names them (throws maxctx::Error for write, std::bad_alloc for alloc, never returns for
// collective and kill), else returns.
void inject_fault(FaultKind kind, int64_t step);
// The injection points at the start of a training step: alloc, collective, kill.
void inject_step_faults(int64_t step);

}  // namespace maxctx

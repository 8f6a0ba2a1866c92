// Writing the recorded trace (core/trace.h) of every rank of a communicator as one Chrome
// trace-event JSON file: each rank is a process ("rank r"), its tracks are threads ("main",
// "transfers in flight"), every span a complete event ("ph": "X") with its category and args.
//
// Time zero is each rank's trace::origin_ns(); start_trace() takes it right after a barrier, so
// ranks line up to within the barrier's skew (on one node steady_clock is shared anyway).
// Collective over `comm`: every rank sends its events to rank 0, which writes the file; a
// failure to write ends every rank with rank 0's message (run_on_root).
#pragma once

#include <filesystem>
#include <string>
#include <vector>

#include "maxctx/core/trace.h"
#include "maxctx/mesh/communicator.h"

namespace maxctx {

// Collective: a barrier, then trace::start with the time after it.
void start_trace(const Communicator& comm);

// The JSON objects (one per line, comma-separated) of `events` as process `pid`, timestamps in
// microseconds from `origin_ns`, with the process and thread name records first.
std::string trace_events_json(const std::vector<trace::Event>& events, int pid, int64_t origin_ns);

// Collective: stops recording and writes every rank's events to `path` (rank 0).
void write_trace(const Communicator& comm, const std::filesystem::path& path);

}  // namespace maxctx

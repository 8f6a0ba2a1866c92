// What a trace (mesh/trace_file.h's Chrome trace-event JSON) says about where each rank's time
// went: `maxctx trace-summary <trace>` and the end of a profiled run print it.
//
// Per rank (a trace process), over its window (first step span's start to the last one's end;
// the whole trace when it has no step spans):
//   compute  time covered by compute spans (kernel ops), overlaps counted once
//   comm     time covered by comm spans: blocking collectives and waits on the main track, and
//            isend/irecv from post to completion on the "transfers in flight" track
//   exposed  comm time during which no compute ran: what communication cost the step
//   idle     window time covered by no compute, comm, io or data span (host overhead, skew)
// and the ops that took the most time (sum of their spans' durations, leaves only).
// Containers (step, layer, optimizer) only frame the others.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

namespace maxctx {

struct OpTime {
  std::string name;
  std::string category;
  double ms = 0.0;
  int64_t calls = 0;
};

struct RankTime {
  int rank = 0;
  int64_t steps = 0;  // step spans
  double window_ms = 0.0;
  double compute_ms = 0.0;
  double comm_ms = 0.0;
  double exposed_comm_ms = 0.0;
  double io_ms = 0.0;
  double data_ms = 0.0;
  double idle_ms = 0.0;
  std::vector<OpTime> top_ops;  // longest first
};

// One complete event ("ph": "X") of a trace: a span of rank `pid` on track `tid` (0 the main one).
struct TraceSpan {
  std::string name, category;
  int pid = 0, tid = 0;
  double begin_us = 0.0, duration_us = 0.0;
};

// The complete events of a trace file in file order, for the summary and the timeline plot (an
// error names the file and what is wrong with it; a trace without one is an error).
std::vector<TraceSpan> read_trace_spans(const std::filesystem::path& trace);

// Reads the trace (read_trace_spans) and sums it per rank.
std::vector<RankTime> summarize_trace(const std::filesystem::path& trace, int top_ops = 8);

// A table, one row per rank, the compute imbalance across ranks, then each rank's top ops.
std::string format_trace_summary(const std::vector<RankTime>& ranks);

}  // namespace maxctx

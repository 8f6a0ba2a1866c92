// `maxctx plot --trace <trace.json>`: a trace (mesh/trace_file.h's Chrome JSON) drawn as a
// timeline PNG, for documents and for a glance without a viewer: one band per rank, its main
// track's spans stacked by nesting depth (step, layer, op), its transfers in flight below,
// boxes colored by category (compute blue, comm red, io green, data purple, containers gray).
// Perfetto remains the tool to explore a trace; this is a picture of one window of it.
#pragma once

#include <filesystem>

namespace maxctx::plot {

struct TimelineWindow {
  double from_ms = -1;  // < 0: from the first step span (or the first span)
  double to_ms = -1;    // < 0: to the end of that step span (or of the trace)
};

void render_timeline(const std::filesystem::path& trace, const std::filesystem::path& png,
                     const TimelineWindow& window, int width = 1600);

}  // namespace maxctx::plot

#include "maxctx/plot/timeline.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <string>
#include <vector>

#include "maxctx/core/check.h"
#include "maxctx/io/trace_summary.h"
#include "maxctx/plot/canvas.h"

namespace maxctx::plot {
namespace {

struct Box {
  std::string name, category;
  double begin_ms = 0, end_ms = 0;
  int row = 0;
};

Color category_color(const std::string& category) {
  if (category == "compute") return {0.30, 0.55, 0.85};
  if (category == "comm") return {0.90, 0.35, 0.30};
  if (category == "io") return {0.35, 0.70, 0.35};
  if (category == "data") return {0.60, 0.45, 0.75};
  return {0.78, 0.78, 0.78};  // step, layer, optimizer: containers
}

// Rows by nesting: sorted by start (longer first), a span sits one row below the innermost
// open span that contains it.
int stack_rows(std::vector<Box>& boxes) {
  std::sort(boxes.begin(), boxes.end(), [](const Box& a, const Box& b) {
    return a.begin_ms != b.begin_ms ? a.begin_ms < b.begin_ms : a.end_ms > b.end_ms;
  });
  std::vector<double> open_ends;
  int rows = 0;
  for (Box& b : boxes) {
    while (!open_ends.empty() && open_ends.back() <= b.begin_ms) open_ends.pop_back();
    b.row = static_cast<int>(open_ends.size());
    open_ends.push_back(b.end_ms);
    rows = std::max(rows, b.row + 1);
  }
  return rows;
}

// Rows for transfers that may overlap one another: the first lane free at the start.
int lane_rows(std::vector<Box>& boxes) {
  std::sort(boxes.begin(), boxes.end(),
            [](const Box& a, const Box& b) { return a.begin_ms < b.begin_ms; });
  std::vector<double> lane_ends;
  for (Box& b : boxes) {
    size_t lane = 0;
    while (lane < lane_ends.size() && lane_ends[lane] > b.begin_ms) ++lane;
    if (lane == lane_ends.size()) lane_ends.push_back(0);
    lane_ends[lane] = b.end_ms;
    b.row = static_cast<int>(lane);
  }
  return static_cast<int>(lane_ends.size());
}

}  // namespace

void render_timeline(const std::filesystem::path& trace, const std::filesystem::path& png,
                     const TimelineWindow& window, int width) {
  std::map<int, std::map<int, std::vector<Box>>> tracks;  // pid -> tid -> spans
  double first_step_begin = -1, first_step_end = -1, lo = 1e300, hi = -1e300;
  for (const TraceSpan& span : read_trace_spans(trace)) {
    Box b;
    b.name = span.name;
    b.category = span.category;
    b.begin_ms = span.begin_us / 1000.0;
    b.end_ms = b.begin_ms + span.duration_us / 1000.0;
    lo = std::min(lo, b.begin_ms);
    hi = std::max(hi, b.end_ms);
    if (b.category == "step" && (first_step_begin < 0 || b.begin_ms < first_step_begin)) {
      first_step_begin = b.begin_ms;
      first_step_end = b.end_ms;
    }
    tracks[span.pid][span.tid].push_back(b);
  }
  const double from = window.from_ms >= 0     ? window.from_ms
                      : first_step_begin >= 0 ? first_step_begin
                                              : lo;
  const double to = window.to_ms >= 0 ? window.to_ms : first_step_end >= 0 ? first_step_end : hi;
  if (to <= from) fail("timeline window {}..{} ms is empty", from, to);

  constexpr double kRowHeight = 16, kLabelWidth = 120, kBandGap = 18, kTop = 40, kBottom = 50;
  std::map<int, std::map<int, int>> rows;
  double height = kTop + kBottom;
  for (auto& [pid, by_tid] : tracks) {
    for (auto& [tid, boxes] : by_tid) {
      rows[pid][tid] = tid == 0 ? stack_rows(boxes) : lane_rows(boxes);
      height += kRowHeight * rows[pid][tid] + 6;
    }
    height += kBandGap;
  }
  Canvas canvas(width, static_cast<int>(height));
  Panel axis;
  axis.left = kLabelWidth;
  axis.width = width - kLabelWidth - 20;
  axis.top = kTop;
  axis.height = height - kTop - kBottom;
  axis.x_lo = 0;
  axis.x_hi = to - from;
  axis.y_ticks = false;
  const std::string name = (trace.parent_path().filename() / trace.filename()).string();
  axis.frame(canvas, fmt::format("{} ({:.1f} ms from {:.1f} ms)", name, to - from, from), "ms");
  double y = kTop + 4;
  for (auto& [pid, by_tid] : tracks) {
    for (auto& [tid, boxes] : by_tid) {
      canvas.text(8, y + 12, fmt::format("rank {} {}", pid, tid == 0 ? "main" : "in flight"), 11);
      canvas.clip(axis.left, axis.top, axis.width, axis.height);
      for (const Box& b : boxes) {
        if (b.end_ms < from || b.begin_ms > to) continue;
        const double x0 = axis.px(b.begin_ms - from), x1 = axis.px(b.end_ms - from);
        const double by = y + kRowHeight * b.row;
        canvas.box(x0, by, std::max(1.0, x1 - x0), kRowHeight - 2, category_color(b.category));
        if (x1 - x0 > 7.0 * static_cast<double>(b.name.size())) {
          canvas.text(x0 + 3, by + 11, b.name, 10);
        }
      }
      canvas.unclip();
      y += kRowHeight * rows[pid][tid] + 6;
    }
    canvas.line(axis.left, y + kBandGap / 2 - 3, axis.left + axis.width, y + kBandGap / 2 - 3,
                {0.6, 0.6, 0.6});
    y += kBandGap;
  }
  const char* legend[] = {"compute", "comm", "io", "data", "step"};
  double x = kLabelWidth;
  for (const char* category : legend) {
    canvas.box(x, height - 16, 12, 10, category_color(category));
    canvas.text(x + 16, height - 7,
                std::string(category) == "step" ? "step/layer/optimizer" : category, 11);
    x += 130;
  }
  canvas.write_png(png);
}

}  // namespace maxctx::plot

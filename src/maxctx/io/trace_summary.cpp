// Trace summary (see trace_summary.h): interval arithmetic over each rank's spans.
#include "maxctx/io/trace_summary.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <nlohmann/json.hpp>

#include "maxctx/core/check.h"
#include "maxctx/core/input_file.h"
#include "maxctx/core/json_checks.h"

namespace maxctx {
namespace {

struct Interval {
  double begin = 0.0, end = 0.0;  // microseconds
};
using Intervals = std::vector<Interval>;

// Sorted, disjoint, each clipped to `window`.
Intervals merged(Intervals spans, const Interval& window) {
  std::sort(spans.begin(), spans.end(),
            [](const Interval& a, const Interval& b) { return a.begin < b.begin; });
  Intervals out;
  for (Interval s : spans) {
    s.begin = std::max(s.begin, window.begin);
    s.end = std::min(s.end, window.end);
    if (s.end <= s.begin) continue;
    if (!out.empty() && s.begin <= out.back().end) {
      out.back().end = std::max(out.back().end, s.end);
    } else {
      out.push_back(s);
    }
  }
  return out;
}

double length(const Intervals& disjoint) {
  double total = 0.0;
  for (const Interval& s : disjoint) total += s.end - s.begin;
  return total;
}

// Length of a \ b, both sorted and disjoint.
double length_outside(const Intervals& a, const Intervals& b) {
  double total = 0.0;
  size_t j = 0;
  for (const Interval& s : a) {
    double covered = 0.0;
    while (j < b.size() && b[j].end <= s.begin) ++j;
    for (size_t k = j; k < b.size() && b[k].begin < s.end; ++k) {
      covered += std::min(s.end, b[k].end) - std::max(s.begin, b[k].begin);
    }
    total += (s.end - s.begin) - covered;
  }
  return total;
}

bool is_leaf(const std::string& category) {
  return category == "compute" || category == "comm" || category == "io" || category == "data";
}

struct RankSpans {
  std::map<std::string, Intervals> by_category;
  std::map<std::string, OpTime> ops;
  Intervals steps;
  Interval extent{1e300, -1e300};
};

}  // namespace

std::vector<TraceSpan> read_trace_spans(const std::filesystem::path& trace) {
  const std::string text = read_input_file(trace, "trace", 4 * kGiB);
  if (const JsonCheck check = check_json(text); check.too_deep) {
    fail("the trace {} is {}", trace.string(), *check.error);
  }
  const nlohmann::json doc = nlohmann::json::parse(text, nullptr, false);
  if (doc.is_discarded()) fail("{} is not JSON", trace.string());
  if (!(doc.is_object() && doc.contains("traceEvents") && doc["traceEvents"].is_array()))
    fail("{} is not a Chrome trace: it has no traceEvents array", trace.string());
  std::vector<TraceSpan> spans;
  for (const nlohmann::json& e : doc["traceEvents"]) {
    if (!e.is_object() || e.value("ph", "") != "X") continue;
    if (!(e.contains("ts") && e["ts"].is_number() && e.contains("dur") && e["dur"].is_number() &&
          e.contains("pid") && e["pid"].is_number_integer()))
      fail("{}: a complete event without numeric ts, dur and pid", trace.string());
    TraceSpan span;
    span.name = e.value("name", "");
    span.category = e.value("cat", "");
    span.pid = e["pid"].get<int>();
    span.tid = e.value("tid", 0);
    span.begin_us = e["ts"].get<double>();
    span.duration_us = e["dur"].get<double>();
    spans.push_back(std::move(span));
  }
  if (spans.empty()) fail("{} holds no complete (\"ph\": \"X\") events", trace.string());
  return spans;
}

std::vector<RankTime> summarize_trace(const std::filesystem::path& trace, int top_ops) {
  std::map<int, RankSpans> ranks;
  for (const TraceSpan& s : read_trace_spans(trace)) {
    RankSpans& r = ranks[s.pid];
    const Interval span{s.begin_us, s.begin_us + s.duration_us};
    r.extent.begin = std::min(r.extent.begin, span.begin);
    r.extent.end = std::max(r.extent.end, span.end);
    if (s.category == "step") r.steps.push_back(span);
    if (!is_leaf(s.category)) continue;
    r.by_category[s.category].push_back(span);
    const bool in_flight = s.tid != 0;
    OpTime& op = r.ops[in_flight ? s.name + " (in flight)" : s.name];
    op.name = in_flight ? s.name + " (in flight)" : s.name;
    op.category = s.category;
    op.ms += (span.end - span.begin) / 1000.0;
    ++op.calls;
  }

  std::vector<RankTime> out;
  for (auto& [pid, r] : ranks) {
    Interval window = r.extent;
    if (!r.steps.empty()) {
      window.begin = 1e300;
      window.end = -1e300;
      for (const Interval& s : r.steps) {
        window.begin = std::min(window.begin, s.begin);
        window.end = std::max(window.end, s.end);
      }
    }
    const Intervals compute = merged(r.by_category["compute"], window);
    const Intervals comm = merged(r.by_category["comm"], window);
    Intervals busy_spans;
    for (const auto& [category, spans] : r.by_category) {
      busy_spans.insert(busy_spans.end(), spans.begin(), spans.end());
    }
    RankTime t;
    t.rank = pid;
    t.steps = static_cast<int64_t>(r.steps.size());
    t.window_ms = (window.end - window.begin) / 1000.0;
    t.compute_ms = length(compute) / 1000.0;
    t.comm_ms = length(comm) / 1000.0;
    t.exposed_comm_ms = length_outside(comm, compute) / 1000.0;
    t.io_ms = length(merged(r.by_category["io"], window)) / 1000.0;
    t.data_ms = length(merged(r.by_category["data"], window)) / 1000.0;
    t.idle_ms = t.window_ms - length(merged(busy_spans, window)) / 1000.0;
    for (const auto& [name, op] : r.ops) t.top_ops.push_back(op);
    std::sort(t.top_ops.begin(), t.top_ops.end(),
              [](const OpTime& a, const OpTime& b) { return a.ms > b.ms; });
    if (static_cast<int>(t.top_ops.size()) > top_ops) t.top_ops.resize(top_ops);
    out.push_back(std::move(t));
  }
  return out;
}

std::string format_trace_summary(const std::vector<RankTime>& ranks) {
  auto percent = [](double part, double whole) { return whole > 0 ? 100.0 * part / whole : 0.0; };
  std::string text =
      fmt::format("{:>4} {:>6} {:>11} {:>18} {:>11} {:>18} {:>16}\n", "rank", "steps", "window ms",
                  "compute ms", "comm ms", "exposed comm ms", "idle ms");
  double most = 0.0, least = 1e300;
  for (const RankTime& r : ranks) {
    text += fmt::format(
        "{:>4} {:>6} {:>11.2f} {:>10.2f} ({:4.1f}%) {:>11.2f} {:>10.2f} ({:4.1f}%) {:>8.2f} "
        "({:4.1f}%)\n",
        r.rank, r.steps, r.window_ms, r.compute_ms, percent(r.compute_ms, r.window_ms), r.comm_ms,
        r.exposed_comm_ms, percent(r.exposed_comm_ms, r.window_ms), r.idle_ms,
        percent(r.idle_ms, r.window_ms));
    most = std::max(most, r.compute_ms);
    least = std::min(least, r.compute_ms);
  }
  if (ranks.size() > 1 && least > 0) {
    text += fmt::format("compute imbalance: slowest rank / fastest = {:.3f}\n", most / least);
  }
  for (const RankTime& r : ranks) {
    text += fmt::format("top ops, rank {}:\n", r.rank);
    for (const OpTime& op : r.top_ops) {
      text += fmt::format("  {:<36} {:<8} {:>10.2f} ms {:>5.1f}% {:>7} calls\n", op.name,
                          op.category, op.ms, percent(op.ms, r.window_ms), op.calls);
    }
  }
  return text;
}

}  // namespace maxctx

// `maxctx trace-summary <trace.json>` and `maxctx plot <run dir> [...] [--out file.png]` /
// `maxctx plot --trace <trace.json> [--from-ms A --to-ms B] [--out file.png]`: reading a run's
// outputs back (io/trace_summary.h, plot/metrics_plot.h, plot/timeline.h). No config, no mesh:
// they run on one process, after the run.
#include <fmt/format.h>

#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "maxctx/core/check.h"
#include "maxctx/core/log.h"
#include "maxctx/io/trace_summary.h"
#include "maxctx/plot/metrics_plot.h"
#include "maxctx/plot/timeline.h"

namespace maxctx::cli {
namespace {

double parse_ms(const std::string& flag, const std::string& text) {
  size_t used = 0;
  double value = 0;
  try {
    value = std::stod(text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used != text.size() || value < 0) fail("{} {}: expected milliseconds >= 0", flag, text);
  return value;
}

}  // namespace

int run_trace_summary(const Args& args) {
  if (args.size() != 1) fail("usage: maxctx trace-summary <trace.json>");
  const std::string text = format_trace_summary(summarize_trace(args[0]));
  if (log::rank() == 0) std::fputs(text.c_str(), stdout);
  return 0;
}

int run_plot(const Args& args) {
  std::vector<std::filesystem::path> runs;
  std::filesystem::path out, trace;
  plot::TimelineWindow window;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    const bool has_value = i + 1 < args.size();
    if ((a == "--out" || a == "--trace" || a == "--from-ms" || a == "--to-ms") && !has_value) {
      fail("plot: {} needs a value", a);
    }
    if (a == "--out") {
      out = args[++i];
    } else if (a == "--trace") {
      trace = args[++i];
    } else if (a == "--from-ms") {
      window.from_ms = parse_ms(a, args[++i]);
    } else if (a == "--to-ms") {
      window.to_ms = parse_ms(a, args[++i]);
    } else if (a.starts_with("--")) {
      fail("plot: unknown option {}; options are --out, --trace, --from-ms, --to-ms", a);
    } else {
      runs.emplace_back(a);
    }
  }
  if (trace.empty() == runs.empty()) {
    fail(
        "usage: maxctx plot <run dir> [<run dir> ...] [--out file.png]\n"
        "       maxctx plot --trace <trace.json> [--from-ms A --to-ms B] [--out file.png]");
  }
  if (!trace.empty()) {
    if (out.empty()) out = trace.parent_path() / "timeline.png";
    plot::render_timeline(trace, out, window);
  } else {
    if (out.empty()) out = runs[0] / "metrics.png";
    std::vector<plot::RunMetrics> metrics;
    for (const auto& run : runs) metrics.push_back(plot::read_run_metrics(run));
    plot::plot_runs(metrics, out);
  }
  log::info("plot: wrote {}", out.string());
  return 0;
}

}  // namespace maxctx::cli

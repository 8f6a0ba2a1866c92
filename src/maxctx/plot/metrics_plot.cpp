#include "maxctx/plot/metrics_plot.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>

#include "maxctx/core/check.h"
#include "maxctx/core/input_file.h"
#include "maxctx/plot/canvas.h"

namespace maxctx::plot {
namespace {

struct Curve {
  const char* metric;
  bool dashed;
};

struct PanelSpec {
  const char* title;
  std::vector<Curve> curves;
  bool skip_first_step;  // the first step carries warm-up: leave it out of a rate
};

const std::vector<PanelSpec>& panels() {
  static const std::vector<PanelSpec> list = {
      {"loss", {{"learning/loss", false}, {"eval/avg_loss", true}}, false},
      {"accuracy", {{"learning/accuracy", false}, {"eval/accuracy", true}}, false},
      {"tokens/s/device", {{"perf/per_device_tokens_per_sec", false}}, true},
      {"learning rate", {{"learning/current_learning_rate", false}}, false},
  };
  return list;
}

}  // namespace

RunMetrics read_run_metrics(const std::filesystem::path& run_dir) {
  const std::filesystem::path file = run_dir / "metrics.jsonl";
  std::error_code absent;
  if (!std::filesystem::exists(std::filesystem::symlink_status(file, absent))) {
    fail("no {} (is {} a run directory?)", file.string(), run_dir.string());
  }
  InputFile in(file, "metrics file", kAnySize);
  RunMetrics run;
  run.name = std::filesystem::absolute(run_dir).lexically_normal().filename().string();
  if (run.name.empty()) {
    run.name = std::filesystem::absolute(run_dir).lexically_normal().parent_path().filename();
  }
  std::map<std::string, std::map<double, double>> by_step;
  std::string line;
  for (int64_t number = 1; in.read_line(line); ++number) {
    if (line.empty()) continue;
    const nlohmann::json row = nlohmann::json::parse(line, nullptr, false);
    if (!(!row.is_discarded() && row.is_object() && row.contains("step") &&
          row["step"].is_number()))
      fail("{}:{}: not a metrics line (a JSON object with a step)", file.string(), number);
    const double step = row["step"].get<double>();
    for (const auto& [key, value] : row.items()) {
      if (key != "step" && value.is_number()) by_step[key][step] = value.get<double>();
    }
  }
  for (const auto& [key, points] : by_step) {
    Series& s = run.series[key];
    for (const auto& [step, value] : points) {
      s.steps.push_back(step);
      s.values.push_back(value);
    }
  }
  return run;
}

void plot_runs(const std::vector<RunMetrics>& runs, const std::filesystem::path& png, int width,
               int height) {
  if (runs.empty()) fail("plot: no runs");
  Canvas canvas(width, height);
  const double legend_height = 24.0 + 16.0 * static_cast<double>(runs.size());
  const double cell_w = width / 2.0, cell_h = (height - legend_height) / 2.0;
  for (size_t r = 0; r < runs.size(); ++r) {
    const double y = 20.0 + 16.0 * static_cast<double>(r);
    canvas.line(20, y - 4, 44, y - 4, series_color(static_cast<int>(r)), 2.5);
    canvas.text(50, y, runs[r].name, 12);
  }
  canvas.text(width - 20.0, 20, "solid: train, dashed: eval", 11, 1, {0.3, 0.3, 0.3});
  for (size_t p = 0; p < panels().size(); ++p) {
    const PanelSpec& spec = panels()[p];
    Panel panel;
    panel.left = cell_w * static_cast<double>(p % 2) + 70;
    panel.top = legend_height + cell_h * static_cast<double>(p / 2) + 30;
    panel.width = cell_w - 100;
    panel.height = cell_h - 80;
    double x_lo = std::numeric_limits<double>::infinity(), x_hi = -x_lo;
    double y_lo = x_lo, y_hi = -x_lo;
    for (const RunMetrics& run : runs) {
      for (const Curve& curve : spec.curves) {
        const auto it = run.series.find(curve.metric);
        if (it == run.series.end()) continue;
        for (size_t i = spec.skip_first_step ? 1 : 0; i < it->second.steps.size(); ++i) {
          x_lo = std::min(x_lo, it->second.steps[i]);
          x_hi = std::max(x_hi, it->second.steps[i]);
          y_lo = std::min(y_lo, it->second.values[i]);
          y_hi = std::max(y_hi, it->second.values[i]);
        }
      }
    }
    if (!(x_hi >= x_lo)) {
      canvas.text(panel.left + panel.width / 2, panel.top + panel.height / 2,
                  std::string("no ") + spec.title + " in these runs", 12, 0.5, {0.5, 0.5, 0.5});
      continue;
    }
    if (x_hi == x_lo) x_hi = x_lo + 1;
    const double pad = y_hi > y_lo ? 0.05 * (y_hi - y_lo) : std::max(1e-12, std::abs(y_hi) * 0.1);
    panel.x_lo = x_lo;
    panel.x_hi = x_hi;
    panel.y_lo = y_lo - pad;
    panel.y_hi = y_hi + pad;
    panel.frame(canvas, spec.title, "step");
    canvas.clip(panel.left, panel.top, panel.width, panel.height);
    for (size_t r = 0; r < runs.size(); ++r) {
      for (const Curve& curve : spec.curves) {
        const auto it = runs[r].series.find(curve.metric);
        if (it == runs[r].series.end()) continue;
        std::vector<double> xs, ys;
        for (size_t i = spec.skip_first_step ? 1 : 0; i < it->second.steps.size(); ++i) {
          xs.push_back(panel.px(it->second.steps[i]));
          ys.push_back(panel.py(it->second.values[i]));
        }
        canvas.polyline(xs, ys, series_color(static_cast<int>(r)), 1.5, curve.dashed);
      }
    }
    canvas.unclip();
  }
  canvas.write_png(png);
}

}  // namespace maxctx::plot

// `maxctx plot <run dir> ...`: one PNG of training curves against step, runs overlaid: loss
// (eval loss dashed when the run has it), accuracy (train solid, eval dashed) when it has it,
// throughput (tokens/s/device) and learning rate. Reads each run's metrics.jsonl (the metric
// names of train/metrics.h; eval under "eval/avg_loss", "eval/accuracy", MaxText's names).
#pragma once

#include <filesystem>
#include <map>
#include <string>
#include <vector>

namespace maxctx::plot {

// One metric of one run: (step, value) in file order.
struct Series {
  std::vector<double> steps, values;
};

struct RunMetrics {
  std::string name;                      // the run directory's name
  std::map<std::string, Series> series;  // by metric name
};

// Reads <run dir>/metrics.jsonl (a missing file or a bad line is an error naming it). A resumed
// run's repeated steps keep the last value written.
RunMetrics read_run_metrics(const std::filesystem::path& run_dir);

// Draws the runs into a PNG of `width` x `height` pixels.
void plot_runs(const std::vector<RunMetrics>& runs, const std::filesystem::path& png,
               int width = 1200, int height = 800);

}  // namespace maxctx::plot

// Plots (plot/metrics_plot.h, plot/timeline.h): the PNGs have the requested size and show each
// run's color and the categories' colors where there is data for them.
#include <cairo.h>
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <string>

#include "maxctx/core/check.h"
#include "maxctx/plot/canvas.h"
#include "maxctx/plot/metrics_plot.h"
#include "maxctx/plot/timeline.h"

namespace maxctx::plot {
namespace {

namespace fs = std::filesystem;

// Pixels of the PNG within 3/255 of `color` per channel (lines are antialiased: only their
// cores count).
int64_t pixels_of(const fs::path& png, Color color, int* width = nullptr, int* height = nullptr) {
  cairo_surface_t* image = cairo_image_surface_create_from_png(png.c_str());
  EXPECT_EQ(cairo_surface_status(image), CAIRO_STATUS_SUCCESS) << png;
  const int w = cairo_image_surface_get_width(image), h = cairo_image_surface_get_height(image);
  const int stride = cairo_image_surface_get_stride(image);
  const unsigned char* data = cairo_image_surface_get_data(image);
  int64_t count = 0;
  for (int y = 0; y < h; ++y) {
    for (int x = 0; x < w; ++x) {
      const auto* p = data + y * stride + 4 * x;  // native-endian xRGB: B, G, R on x86
      if (std::abs(p[2] - color.r * 255) <= 3 && std::abs(p[1] - color.g * 255) <= 3 &&
          std::abs(p[0] - color.b * 255) <= 3) {
        ++count;
      }
    }
  }
  if (width != nullptr) *width = w;
  if (height != nullptr) *height = h;
  cairo_surface_destroy(image);
  return count;
}

void write_run(const fs::path& dir, double scale) {
  fs::create_directories(dir);
  std::ofstream out(dir / "metrics.jsonl");
  for (int step = 0; step < 50; ++step) {
    out << "{\"step\":" << step << ",\"learning/loss\":" << scale * (5.0 - 0.05 * step)
        << ",\"learning/accuracy\":" << 0.01 * step
        << ",\"perf/per_device_tokens_per_sec\":" << 1000 + step
        << ",\"learning/current_learning_rate\":" << 1e-3 * (step < 10 ? step : 10) << "}\n";
  }
  out << "{\"step\":49,\"eval/avg_loss\":" << scale * 2.8 << "}\n";
}

TEST(Plot, RunsAreOverlaidInTheirColors) {
  const fs::path root = fs::temp_directory_path() / "maxctx_plot_test";
  fs::remove_all(root);
  write_run(root / "a", 1.0);
  write_run(root / "b", 0.8);
  const RunMetrics a = read_run_metrics(root / "a");
  EXPECT_EQ(a.name, "a");
  ASSERT_EQ(a.series.at("learning/loss").steps.size(), 50u);
  EXPECT_EQ(a.series.at("eval/avg_loss").values, std::vector<double>{2.8});
  plot_runs({a, read_run_metrics(root / "b")}, root / "plot.png", 900, 600);
  int width = 0, height = 0;
  EXPECT_GT(pixels_of(root / "plot.png", series_color(0), &width, &height), 100);
  EXPECT_GT(pixels_of(root / "plot.png", series_color(1)), 100);
  EXPECT_EQ(pixels_of(root / "plot.png", series_color(2)), 0);
  EXPECT_EQ(width, 900);
  EXPECT_EQ(height, 600);
  EXPECT_THROW(read_run_metrics(root / "missing"), Error);
  fs::remove_all(root);
}

TEST(Plot, TimelineDrawsEachCategory) {
  const fs::path root = fs::temp_directory_path() / "maxctx_timeline_test";
  fs::create_directories(root);
  std::ofstream(root / "trace.json") << R"({"traceEvents":[
      {"name":"step","cat":"step","ph":"X","ts":0,"dur":10000,"pid":0,"tid":0},
      {"name":"attention_forward","cat":"compute","ph":"X","ts":0,"dur":6000,"pid":0,"tid":0},
      {"name":"irecv","cat":"comm","ph":"X","ts":1000,"dur":4000,"pid":0,"tid":1},
      {"name":"step","cat":"step","ph":"X","ts":0,"dur":10000,"pid":1,"tid":0}]})";
  render_timeline(root / "trace.json", root / "timeline.png", {}, 800);
  EXPECT_GT(pixels_of(root / "timeline.png", {0.30, 0.55, 0.85}), 1000);  // compute
  EXPECT_GT(pixels_of(root / "timeline.png", {0.90, 0.35, 0.30}), 500);   // comm
  fs::remove_all(root);
}

}  // namespace
}  // namespace maxctx::plot

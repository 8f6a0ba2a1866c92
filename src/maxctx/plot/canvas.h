// A small drawing surface over cairo for the project's PNGs (plot/metrics_plot.h,
// plot/timeline.h): panels with axes and "nice" ticks, lines, boxes, text. Not a plotting
// library: just what those two pictures need, so each reads as a list of things drawn.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

typedef struct _cairo cairo_t;
typedef struct _cairo_surface cairo_surface_t;

namespace maxctx::plot {

struct Color {
  double r = 0, g = 0, b = 0;
};

// A distinct color per series index (a qualitative palette, cycled).
Color series_color(int index);

// Up to ~6 round tick values covering [lo, hi].
std::vector<double> nice_ticks(double lo, double hi);

class Canvas {
 public:
  Canvas(int width, int height);  // white background
  ~Canvas();
  Canvas(const Canvas&) = delete;
  Canvas& operator=(const Canvas&) = delete;

  void line(double x0, double y0, double x1, double y1, Color color, double width = 1.0,
            bool dashed = false);
  void polyline(const std::vector<double>& xs, const std::vector<double>& ys, Color color,
                double width = 1.5, bool dashed = false);
  void box(double x, double y, double w, double h, Color fill);
  void outline(double x, double y, double w, double h, Color color, double width = 1.0);
  // Text with its left edge at x (align 0), centred (0.5) or right edge at x (1); baseline y.
  void text(double x, double y, const std::string& s, double size = 11, double align = 0,
            Color color = {});
  // Clip drawing to a rectangle until unclip().
  void clip(double x, double y, double w, double h);
  void unclip();
  // Writes the PNG (an error names the path).
  void write_png(const std::filesystem::path& path);

 private:
  cairo_surface_t* surface_;
  cairo_t* cr_;
};

// A panel: a data rectangle with x and y ranges, axis ticks and labels drawn by frame().
struct Panel {
  double left = 0, top = 0, width = 0, height = 0;  // pixels of the data area
  double x_lo = 0, x_hi = 1, y_lo = 0, y_hi = 1;
  bool y_ticks = true;  // false: the y extent is rows, not a quantity (the timeline)

  double px(double x) const;
  double py(double y) const;
  void frame(Canvas& canvas, const std::string& title, const std::string& x_label) const;
};

}  // namespace maxctx::plot

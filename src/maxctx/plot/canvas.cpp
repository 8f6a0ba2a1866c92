#include "maxctx/plot/canvas.h"

#include <cairo.h>
#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cmath>

#include "maxctx/core/check.h"

namespace maxctx::plot {

Color series_color(int index) {
  // Tableau 10: distinguishable and print-safe.
  static constexpr std::array<Color, 10> kPalette = {{{0.12, 0.47, 0.71},
                                                      {1.00, 0.50, 0.05},
                                                      {0.17, 0.63, 0.17},
                                                      {0.84, 0.15, 0.16},
                                                      {0.58, 0.40, 0.74},
                                                      {0.55, 0.34, 0.29},
                                                      {0.89, 0.47, 0.76},
                                                      {0.50, 0.50, 0.50},
                                                      {0.74, 0.74, 0.13},
                                                      {0.09, 0.75, 0.81}}};
  return kPalette[static_cast<size_t>(index) % kPalette.size()];
}

std::vector<double> nice_ticks(double lo, double hi) {
  if (!(hi > lo)) return {lo};
  const double raw = (hi - lo) / 5;
  const double magnitude = std::pow(10.0, std::floor(std::log10(raw)));
  double step = magnitude;
  for (double m : {1.0, 2.0, 2.5, 5.0, 10.0}) {
    step = m * magnitude;
    if (step >= raw) break;
  }
  std::vector<double> ticks;
  for (double t = std::ceil(lo / step) * step; t <= hi + step * 1e-9; t += step) {
    ticks.push_back(std::abs(t) < step * 1e-9 ? 0.0 : t);
  }
  return ticks;
}

Canvas::Canvas(int width, int height)
    : surface_(cairo_image_surface_create(CAIRO_FORMAT_RGB24, width, height)),
      cr_(cairo_create(surface_)) {
  MAXCTX_CHECK(cairo_status(cr_) == CAIRO_STATUS_SUCCESS, "cairo: cannot create a {}x{} image",
               width, height);
  cairo_set_source_rgb(cr_, 1, 1, 1);
  cairo_paint(cr_);
  cairo_select_font_face(cr_, "sans-serif", CAIRO_FONT_SLANT_NORMAL, CAIRO_FONT_WEIGHT_NORMAL);
}

Canvas::~Canvas() {
  cairo_destroy(cr_);
  cairo_surface_destroy(surface_);
}

void Canvas::line(double x0, double y0, double x1, double y1, Color c, double width, bool dashed) {
  polyline({x0, x1}, {y0, y1}, c, width, dashed);
}

void Canvas::polyline(const std::vector<double>& xs, const std::vector<double>& ys, Color c,
                      double width, bool dashed) {
  if (xs.size() < 2) return;
  cairo_set_source_rgb(cr_, c.r, c.g, c.b);
  cairo_set_line_width(cr_, width);
  const double dash[] = {5.0, 3.0};
  cairo_set_dash(cr_, dash, dashed ? 2 : 0, 0);
  cairo_move_to(cr_, xs[0], ys[0]);
  for (size_t i = 1; i < xs.size(); ++i) cairo_line_to(cr_, xs[i], ys[i]);
  cairo_stroke(cr_);
  cairo_set_dash(cr_, nullptr, 0, 0);
}

void Canvas::box(double x, double y, double w, double h, Color c) {
  cairo_set_source_rgb(cr_, c.r, c.g, c.b);
  cairo_rectangle(cr_, x, y, w, h);
  cairo_fill(cr_);
}

void Canvas::outline(double x, double y, double w, double h, Color c, double width) {
  cairo_set_source_rgb(cr_, c.r, c.g, c.b);
  cairo_set_line_width(cr_, width);
  cairo_rectangle(cr_, x, y, w, h);
  cairo_stroke(cr_);
}

void Canvas::text(double x, double y, const std::string& s, double size, double align, Color c) {
  cairo_set_source_rgb(cr_, c.r, c.g, c.b);
  cairo_set_font_size(cr_, size);
  cairo_text_extents_t extents;
  cairo_text_extents(cr_, s.c_str(), &extents);
  cairo_move_to(cr_, x - align * extents.x_advance, y);
  cairo_show_text(cr_, s.c_str());
}

void Canvas::clip(double x, double y, double w, double h) {
  cairo_save(cr_);
  cairo_rectangle(cr_, x, y, w, h);
  cairo_clip(cr_);
}

void Canvas::unclip() { cairo_restore(cr_); }

void Canvas::write_png(const std::filesystem::path& path) {
  cairo_surface_flush(surface_);
  const cairo_status_t status = cairo_surface_write_to_png(surface_, path.c_str());
  if (status != CAIRO_STATUS_SUCCESS)
    fail("cannot write the image {}: {}", path.string(), cairo_status_to_string(status));
}

double Panel::px(double x) const { return left + (x - x_lo) / (x_hi - x_lo) * width; }

double Panel::py(double y) const { return top + height - (y - y_lo) / (y_hi - y_lo) * height; }

void Panel::frame(Canvas& canvas, const std::string& title, const std::string& x_label) const {
  const Color axis{0.3, 0.3, 0.3}, grid{0.9, 0.9, 0.9};
  for (double t : y_ticks ? nice_ticks(y_lo, y_hi) : std::vector<double>{}) {
    canvas.line(left, py(t), left + width, py(t), grid);
    canvas.text(left - 6, py(t) + 4, fmt::format("{:g}", t), 10, 1, axis);
  }
  for (double t : nice_ticks(x_lo, x_hi)) {
    canvas.line(px(t), top, px(t), top + height, grid);
    canvas.text(px(t), top + height + 14, fmt::format("{:g}", t), 10, 0.5, axis);
  }
  canvas.outline(left, top, width, height, axis);
  canvas.text(left + width / 2, top - 8, title, 13, 0.5);
  if (!x_label.empty()) canvas.text(left + width / 2, top + height + 30, x_label, 11, 0.5, axis);
}

}  // namespace maxctx::plot

// Random inputs and accuracy metrics for the kernel tests; test_util.h defines the metrics.
// A failure names the element, both values, the error and what was allowed.
#include "test_util.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <span>

#include "maxctx/core/dtype.h"
#include "maxctx/core/rng.h"

namespace maxctx::kernels::testing_util {

std::vector<double> normal_values(size_t n, std::string_view stream, float mean, float stddev) {
  std::vector<float> values(n);
  rng::fill_normal(std::span<float>(values), kSeed, rng::stream_id(stream), 0, mean, stddev);
  return widen(values);
}

std::vector<double> uniform_values(size_t n, std::string_view stream, float low, float high) {
  std::vector<float> values(n);
  rng::fill_uniform(std::span<float>(values), kSeed, rng::stream_id(stream), 0, low, high);
  return widen(values);
}

std::vector<int32_t> uniform_ints(size_t n, std::string_view stream, uint32_t bound) {
  std::vector<int32_t> values(n);
  rng::fill_uniform_int(std::span<int32_t>(values), kSeed, rng::stream_id(stream), 0, bound);
  return values;
}

::testing::AssertionResult close(const std::vector<double>& got, const std::vector<double>& want,
                                 int64_t row, Metric metric, double tolerance) {
  if (got.size() != want.size()) {
    return ::testing::AssertionFailure()
           << "size " << got.size() << " but the reference has " << want.size();
  }
  const int64_t n = int64_t(want.size());
  row = std::max<int64_t>(1, row);
  double worst = 0.0;  // largest error / allowed over all elements or rows
  for (int64_t begin = 0; begin < n; begin += row) {
    const int64_t end = std::min(n, begin + row);
    if (metric == Metric::kRowNorm) {
      double error = 0.0;
      double norm = 0.0;
      for (int64_t k = begin; k < end; ++k) {
        error += (got[k] - want[k]) * (got[k] - want[k]);
        norm += want[k] * want[k];
      }
      error = std::sqrt(error);
      const double allowed = tolerance * std::sqrt(norm);
      if (!(error <= allowed)) {
        return ::testing::AssertionFailure()
               << fmt::format("row {}: ‖got − want‖ = {:.3e} > {:.1e}·‖want‖ = {:.3e}", begin / row,
                              error, tolerance, allowed);
      }
      if (allowed > 0) worst = std::max(worst, error / allowed);
      continue;
    }
    double row_scale = 0.0;
    for (int64_t k = begin; k < end; ++k) row_scale = std::max(row_scale, std::abs(want[k]));
    for (int64_t k = begin; k < end; ++k) {
      const double error = std::abs(got[k] - want[k]);
      const double allowed = tolerance * std::max(std::abs(want[k]), row_scale);
      if (!(error <= allowed)) {
        return ::testing::AssertionFailure() << fmt::format(
                   "element {} (row {}): got {:.9g}, want {:.9g}, |error| {:.3e} > allowed "
                   "{:.3e} (tolerance {:.1e}, row scale {:.3e})",
                   k, begin / row, got[k], want[k], error, allowed, tolerance, row_scale);
      }
      if (allowed > 0) worst = std::max(worst, error / allowed);
    }
  }
  return ::testing::AssertionSuccess() << fmt::format("worst error / allowed = {:.3f}", worst);
}

std::vector<double> widen(const TensorView& host) {
  std::vector<double> out(static_cast<size_t>(host.numel()));
  for (size_t i = 0; i < out.size(); ++i) {
    switch (host.dtype()) {
      case DType::kF32:
        out[i] = host.data<float>()[i];
        break;
      case DType::kBF16:
        out[i] = bf16_to_float(host.data<bf16>()[i]);
        break;
      case DType::kI8:
        out[i] = host.data<int8_t>()[i];
        break;
    }
  }
  return out;
}

}  // namespace maxctx::kernels::testing_util

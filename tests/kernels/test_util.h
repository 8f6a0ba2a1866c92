// Helpers for the kernel tests: deterministic random inputs (counter-based, so a case's data
// depends only on its name) and the accuracy metrics every kernel test states.
//
// Metrics, per row of the reference b (a row is the op's natural row: a token, a head, ...):
//   kRowRelative: |a_k − b_k| ≤ tol · max(|b_k|, max_j |b_j|)   (row and elementwise ops)
//   kRowNorm:     ‖a − b‖₂ ≤ tol · ‖b‖₂                          (GEMM outputs)
// A reference row of zeros therefore demands exact zeros.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <string_view>
#include <vector>

#include "maxctx/core/tensor.h"

namespace maxctx::kernels::testing_util {

enum class Metric { kRowRelative, kRowNorm };

inline constexpr uint64_t kSeed = 20261202;

// Values are drawn in float and returned as double, so that float and double runs of a kernel
// see exactly the same inputs.
std::vector<double> normal_values(size_t n, std::string_view stream, float mean, float stddev);
std::vector<double> uniform_values(size_t n, std::string_view stream, float low, float high);
std::vector<int32_t> uniform_ints(size_t n, std::string_view stream, uint32_t bound);

template <typename T>
std::vector<T> cast(const std::vector<double>& values) {
  return std::vector<T>(values.begin(), values.end());
}
// A host view's elements (f32, bf16 or int8) as doubles.
std::vector<double> widen(const TensorView& host);
template <typename T>
std::vector<double> widen(const std::vector<T>& values) {
  return std::vector<double>(values.begin(), values.end());
}

::testing::AssertionResult close(const std::vector<double>& got, const std::vector<double>& want,
                                 int64_t row, Metric metric, double tolerance);

}  // namespace maxctx::kernels::testing_util

#include "maxctx/kernels/ref/int8.h"

#include <algorithm>
#include <cmath>
#include <vector>

namespace maxctx::kernels::ref {

float quantize_row_int8(int8_t* q, const float* x, int64_t cols, float levels) {
  float max_abs = 0.0f;
  for (int64_t i = 0; i < cols; ++i) max_abs = std::max(max_abs, std::fabs(x[i]));
  if (max_abs == 0.0f) {
    std::fill(q, q + cols, int8_t{0});
    return 0.0f;
  }
  const float inv = levels / max_abs;
  for (int64_t i = 0; i < cols; ++i) {
    const float code = std::clamp(std::nearbyint(x[i] * inv), -127.0f, 127.0f);
    q[i] = static_cast<int8_t>(code);
  }
  return max_abs / levels;
}

void quantize_rows_int8(int8_t* q, float* scale, const float* x, int64_t rows, int64_t cols,
                        float levels) {
  for (int64_t r = 0; r < rows; ++r) {
    scale[r] = quantize_row_int8(q + r * cols, x + r * cols, cols, levels);
  }
}

void dequantize_rows_int8(float* x, const int8_t* q, const float* scale, int64_t rows,
                          int64_t cols) {
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t i = 0; i < cols; ++i) x[r * cols + i] = float(q[r * cols + i]) * scale[r];
  }
}

void int8_matmul_forward(float* out, const float* in, const int8_t* w, const float* w_scale,
                         int64_t N, int64_t in_dim, int64_t out_dim) {
  std::vector<int8_t> xq(static_cast<size_t>(in_dim));
  for (int64_t n = 0; n < N; ++n) {
    const float x_scale = quantize_row_int8(xq.data(), in + n * in_dim, in_dim, kInt8Levels);
    for (int64_t o = 0; o < out_dim; ++o) {
      int32_t sum = 0;
      for (int64_t i = 0; i < in_dim; ++i) sum += int32_t{xq[i]} * int32_t{w[o * in_dim + i]};
      out[n * out_dim + o] = float(sum) * (x_scale * w_scale[o]);
    }
  }
}

}  // namespace maxctx::kernels::ref

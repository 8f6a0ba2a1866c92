// Rotary position embedding (kernels/ref/rope.h): cos/sin from angles in double, rounded once to
// fp32; the rotation in fp32 without FMA contraction (the _rn intrinsics), as the reference's
// separate products and sums round.
#include <vector>

#include "maxctx/kernels/cuda/allocator.h"
#include "maxctx/kernels/cuda/cuda_check.h"
#include "maxctx/kernels/cuda/device_float.cuh"
#include "maxctx/kernels/cuda/ops.h"

namespace maxctx::kernels::cuda {
namespace {

__global__ void rope_cos_sin_kernel(float* cos_out, float* sin_out, const int32_t* positions,
                                    const double* inv_freq, int64_t N, int64_t half) {
  MAXCTX_GRID_STRIDE(k, N * half) {
    const int64_t n = k / half, i = k % half;
    const double angle = static_cast<double>(positions[n]) * inv_freq[i];
    cos_out[k] = static_cast<float>(cos(angle));
    sin_out[k] = static_cast<float>(sin(angle));
  }
}

// One thread per (token, head, pair i): reads both halves before writing either (in place).
__global__ void rope_rotate_kernel(DeviceFloats out, ConstDeviceFloats in, const float* cos_table,
                                   const float* sin_table, int64_t N, int64_t H, int64_t half,
                                   float sign) {
  MAXCTX_GRID_STRIDE(k, N * H * half) {
    const int64_t i = k % half, nh = k / half, n = nh / H;
    const int64_t row = nh * 2 * half;
    const float c = cos_table[n * half + i];
    const float s = sign * sin_table[n * half + i];
    const float x1 = load(in, row + i), x2 = load(in, row + half + i);
    store(out, row + i, __fsub_rn(__fmul_rn(x1, c), __fmul_rn(x2, s)));
    store(out, row + half + i, __fadd_rn(__fmul_rn(x2, c), __fmul_rn(x1, s)));
  }
}

}  // namespace

void rope_cos_sin(float* cos, float* sin, const int32_t* positions, int64_t N, int64_t head_dim,
                  const RopeParams& params) {
  const int64_t half = head_dim / 2;
  if (N == 0 || half == 0) return;
  const std::vector<double> inv_freq = rope_inv_freq(params, head_dim);
  auto* device_inv_freq =
      static_cast<double*>(scratch(Scratch::kSmall, inv_freq.size() * sizeof(double)));
  MAXCTX_CUDA_CHECK(cudaMemcpy(device_inv_freq, inv_freq.data(), inv_freq.size() * sizeof(double),
                               cudaMemcpyHostToDevice));
  rope_cos_sin_kernel<<<grid_for(N * half), kThreads>>>(cos, sin, positions, device_inv_freq, N,
                                                        half);
  MAXCTX_CUDA_LAUNCHED("rope_cos_sin");
}

void rope_rotate(DeviceFloats out, ConstDeviceFloats in, const float* cos, const float* sin,
                 int64_t N, int64_t heads, int64_t head_dim, float sign) {
  const int64_t half = head_dim / 2;
  if (N * heads == 0) return;
  rope_rotate_kernel<<<grid_for(N * heads * half), kThreads>>>(out, in, cos, sin, N, heads, half,
                                                               sign);
  MAXCTX_CUDA_LAUNCHED("rope_rotate");
}

}  // namespace maxctx::kernels::cuda

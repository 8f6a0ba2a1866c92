// SwiGLU (kernels/ref/swiglu.h), elementwise: each element read before it is written (in place).
#include "maxctx/kernels/cuda/cuda_check.h"
#include "maxctx/kernels/cuda/device_float.cuh"
#include "maxctx/kernels/cuda/ops.h"

namespace maxctx::kernels::cuda {
namespace {

__global__ void swiglu_forward_kernel(DeviceFloats out, ConstDeviceFloats gate,
                                      ConstDeviceFloats up, int64_t n) {
  MAXCTX_GRID_STRIDE(k, n) {
    const float g = load(gate, k);
    const float sigmoid = 1.0f / (1.0f + expf(-g));
    store(out, k, g * sigmoid * load(up, k));
  }
}

__global__ void swiglu_backward_kernel(DeviceFloats d_gate, DeviceFloats d_up,
                                       ConstDeviceFloats d_out, ConstDeviceFloats gate,
                                       ConstDeviceFloats up, int64_t n) {
  MAXCTX_GRID_STRIDE(k, n) {
    const float g = load(gate, k), u = load(up, k), d = load(d_out, k);
    const float sigmoid = 1.0f / (1.0f + expf(-g));
    store(d_up, k, d * g * sigmoid);
    store(d_gate, k, d * u * sigmoid * (1.0f + g * (1.0f - sigmoid)));
  }
}

}  // namespace

void swiglu_forward(DeviceFloats out, ConstDeviceFloats gate, ConstDeviceFloats up, int64_t n) {
  if (n == 0) return;
  swiglu_forward_kernel<<<grid_for(n), kThreads>>>(out, gate, up, n);
  MAXCTX_CUDA_LAUNCHED("swiglu_forward");
}

void swiglu_backward(DeviceFloats d_gate, DeviceFloats d_up, ConstDeviceFloats d_out,
                     ConstDeviceFloats gate, ConstDeviceFloats up, int64_t n) {
  if (n == 0) return;
  swiglu_backward_kernel<<<grid_for(n), kThreads>>>(d_gate, d_up, d_out, gate, up, n);
  MAXCTX_CUDA_LAUNCHED("swiglu_backward");
}

}  // namespace maxctx::kernels::cuda

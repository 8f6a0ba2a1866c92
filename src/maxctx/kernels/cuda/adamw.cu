// AdamW, optax's rule with the operation order of kernels/cpu/adamw.cpp: the new moments feed
// the update unrounded, params and moments are each rounded once as they are stored. The
// _rn intrinsics keep nvcc from fusing a multiply and an add into one FMA, so each step rounds
// as the cpu backend's separate Mul and Add do.
#include "maxctx/kernels/cuda/cuda_check.h"
#include "maxctx/kernels/cuda/device_float.cuh"
#include "maxctx/kernels/cuda/ops.h"

namespace maxctx::kernels::cuda {
namespace {

__global__ void adamw_kernel(DeviceFloats params, ConstDeviceFloats grads, DeviceFloats mu,
                             DeviceFloats nu, int64_t n, AdamWConstants s) {
  MAXCTX_GRID_STRIDE(i, n) {
    const float g = load(grads, i);
    const float p = load(params, i);
    const float m = __fadd_rn(__fmul_rn(s.one_minus_b1, g), __fmul_rn(s.b1, load(mu, i)));
    const float v =
        __fadd_rn(__fmul_rn(s.one_minus_b2, __fmul_rn(g, g)), __fmul_rn(s.b2, load(nu, i)));
    store(mu, i, m);
    store(nu, i, v);
    const float m_hat = __fdiv_rn(m, s.correction1);
    const float v_hat = __fdiv_rn(v, s.correction2);
    const float adam = __fdiv_rn(m_hat, __fadd_rn(__fsqrt_rn(__fadd_rn(v_hat, s.eps_root)), s.eps));
    const float decayed = __fadd_rn(adam, __fmul_rn(s.weight_decay, p));
    store(params, i, __fsub_rn(p, __fmul_rn(s.learning_rate, decayed)));
  }
}

}  // namespace

void adamw_update(DeviceFloats params, ConstDeviceFloats grads, DeviceFloats mu, DeviceFloats nu,
                  int64_t n, const AdamWConstants& step) {
  if (n == 0) return;
  adamw_kernel<<<grid_for(n), kThreads>>>(params, grads, mu, nu, n, step);
  MAXCTX_CUDA_LAUNCHED("adamw_update");
}

}  // namespace maxctx::kernels::cuda

// The backends this build has, and the helpers every backend shares. A new backend adds its
// folder (kernels/<name>/, implementing kernels.h's Kernels) and one line in backend() below.
#include "maxctx/core/check.h"
#include "maxctx/kernels/cpu/cpu_kernels.h"
#include "maxctx/kernels/kernels.h"
#if MAXCTX_HAVE_CUDA
#include "maxctx/kernels/cuda/cuda_kernels.h"
#endif

namespace maxctx::kernels {

const Kernels& backend(Device device) {
  switch (device) {
    case Device::kCpu:
      return cpu::cpu_kernels();
    case Device::kCuda:
#if MAXCTX_HAVE_CUDA
      return cuda::cuda_kernels();
#else
      break;
#endif
  }
  fail("this build has no {} backend: it has cpu", device_name(device));
}

void Kernels::reserve(Tensor& tensor, int64_t numel, DType dtype) const {
  if (tensor.numel() >= numel && tensor.dtype() == dtype && tensor.device() == device()) return;
  tensor = empty(Shape{numel}, dtype);
}

}  // namespace maxctx::kernels

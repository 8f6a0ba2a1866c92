#include "maxctx/kernels/gpu_devices.h"

#if MAXCTX_HAVE_CUDA
#include "maxctx/kernels/cuda/devices.h"
#endif

namespace maxctx::kernels {

bool has_cuda_backend() { return MAXCTX_HAVE_CUDA != 0; }

GpuDevices visible_gpus() {
#if MAXCTX_HAVE_CUDA
  cuda::CudaDevices devices = cuda::visible_cuda_devices();
  return {std::move(devices.pci_bus_ids), std::move(devices.error)};
#else
  return {{}, "this build has no cuda backend (configured with MAXCTX_CUDA=OFF)"};
#endif
}

std::string select_gpu(int index) {
#if MAXCTX_HAVE_CUDA
  return cuda::select_cuda_device(index);
#else
  return "this build has no cuda backend (configured with MAXCTX_CUDA=OFF)";
#endif
}

}  // namespace maxctx::kernels

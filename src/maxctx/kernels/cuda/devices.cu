#include <cuda_runtime.h>

#include "maxctx/kernels/cuda/devices.h"

namespace maxctx::kernels::cuda {

CudaDevices visible_cuda_devices() {
  CudaDevices devices;
  int count = 0;
  cudaError_t status = cudaGetDeviceCount(&count);
  if (status != cudaSuccess) {
    devices.error = cudaGetErrorString(status);
    cudaGetLastError();  // the runtime keeps the error sticky otherwise
    return devices;
  }
  for (int device = 0; device < count; ++device) {
    char bus_id[32] = {};
    status = cudaDeviceGetPCIBusId(bus_id, sizeof bus_id, device);
    devices.pci_bus_ids.emplace_back(status == cudaSuccess ? bus_id : "unknown");
  }
  if (count == 0) devices.error = "the CUDA runtime sees no device";
  return devices;
}

std::string select_cuda_device(int index) {
  const cudaError_t status = cudaSetDevice(index);
  if (status == cudaSuccess) return "";
  cudaGetLastError();
  return cudaGetErrorString(status);
}

}  // namespace maxctx::kernels::cuda

// The CUDA devices this process sees, asked of the runtime without touching any of them. A plain
// C++ header (no CUDA types), so code outside kernels/cuda/ can ask whether a GPU is there; only
// the .cu files behind it include the toolkit.
#pragma once

#include <string>
#include <vector>

namespace maxctx::kernels::cuda {

struct CudaDevices {
  std::vector<std::string> pci_bus_ids;  // one per visible device, "0000:19:00.0"
  std::string error;  // why none are visible when the runtime says so ("no CUDA-capable device
                      // is detected", a driver too old), empty otherwise
  int count() const { return static_cast<int>(pci_bus_ids.size()); }
};

// Never throws: a machine without a driver or a GPU is an answer (count 0, error set), which
// the caller turns into its own error when it wanted a GPU.
CudaDevices visible_cuda_devices();

// Makes device `index` (0 .. count - 1 of visible_cuda_devices) this process's current device,
// before any other CUDA call of the run (cudaSetDevice). Returns the runtime's reason when it
// fails, empty on success (the caller makes the error; this file stays free of core/ headers).
std::string select_cuda_device(int index);

}  // namespace maxctx::kernels::cuda

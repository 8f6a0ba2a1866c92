// The GPUs this process sees, and the choice of the one it drives, for hardware=gpu: code above
// kernels/ asks here and never names the CUDA backend's headers (kernels/cuda/devices.h answers
// when the build has CUDA).
#pragma once

#include <string>
#include <vector>

namespace maxctx::kernels {

struct GpuDevices {
  std::vector<std::string> pci_bus_ids;  // one per visible device, "0000:19:00.0"
  std::string error;                     // why none are visible, empty otherwise
  int count() const { return static_cast<int>(pci_bus_ids.size()); }
};

// Whether this build has the CUDA backend (MAXCTX_CUDA).
bool has_cuda_backend();
// Never throws: no driver, no GPU or no CUDA build is an answer (count 0, error set).
GpuDevices visible_gpus();
// Makes device `index` this process's current GPU; the runtime's reason when it fails, else "".
std::string select_gpu(int index);

}  // namespace maxctx::kernels

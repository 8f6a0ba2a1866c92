// A float operand of a device kernel: a pointer and whether its elements are f32 or bf16
// (kernels.h's "float" views, each its own dtype). A plain struct, so the backend's host code
// builds it from a view and the kernels (device_float.cuh) read and write through it.
#pragma once

#include <cstdint>

// Callable from device code too when nvcc compiles the includer.
#ifdef __CUDACC__
#define MAXCTX_HOST_DEVICE __host__ __device__
#else
#define MAXCTX_HOST_DEVICE
#endif

namespace maxctx::kernels::cuda {

struct DeviceFloats {
  void* data = nullptr;
  bool bf16 = false;
};

// The same, read only.
struct ConstDeviceFloats {
  const void* data = nullptr;
  bool bf16 = false;
  ConstDeviceFloats() = default;
  MAXCTX_HOST_DEVICE ConstDeviceFloats(const void* d, bool b) : data(d), bf16(b) {}
  MAXCTX_HOST_DEVICE ConstDeviceFloats(DeviceFloats f)  // NOLINT: a const view of the same
      : data(f.data), bf16(f.bf16) {}
};

}  // namespace maxctx::kernels::cuda

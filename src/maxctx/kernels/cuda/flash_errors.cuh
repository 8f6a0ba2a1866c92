// Errors of the CUDA flash attention's .cu files: std::runtime_error with one line, which
// flash_attention.cpp rethrows as maxctx::Error (core/check.h pulls in fmt 9, whose consteval
// format checks nvcc 13 cannot compile, so the .cu files do not include it).
#pragma once

#include <cuda_runtime.h>

#include <stdexcept>
#include <string>

namespace maxctx::kernels::cuda::flash {

[[noreturn]] inline void fail_attention(const std::string& what) {
  throw std::runtime_error("cuda flash attention: " + what);
}

inline void cuda_call_check(cudaError_t status, const char* call) {
  if (status == cudaSuccess) return;
  cudaGetLastError();  // clear a non-sticky error so that the next call does not report it again
  throw std::runtime_error(std::string("cuda: ") + call + " failed: " + cudaGetErrorString(status));
}

}  // namespace maxctx::kernels::cuda::flash

#define MAXCTX_FLASH_CUDA_CHECK(call) ::maxctx::kernels::cuda::flash::cuda_call_check((call), #call)
// After a kernel launch: a bad launch configuration is reported at the launch it belongs to.
#define MAXCTX_FLASH_LAUNCHED(kernel) \
  ::maxctx::kernels::cuda::flash::cuda_call_check(cudaGetLastError(), "launching " kernel)

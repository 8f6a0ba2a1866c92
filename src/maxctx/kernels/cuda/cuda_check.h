// Every CUDA runtime and cuBLAS(Lt) call of the backend goes through these: a failure is one line,
// "cuda: <the call> failed: <the runtime's words>", thrown as maxctx's Error like any bad input.
// Only .cu files of this folder include this header (it includes the toolkit's). The messages
// are formatted in errors.cpp: nvcc's front end cannot compile fmt (core/check.h), so no .cu
// file includes it.
#pragma once

#include <cublasLt.h>
#include <cuda_runtime.h>

#include "maxctx/kernels/cuda/errors.h"

namespace maxctx::kernels::cuda {

inline void cuda_check(cudaError_t status, const char* call) {
  if (status == cudaSuccess) return;
  cudaGetLastError();  // clear a non-sticky error so the next call does not report it again
  cuda_call_failed(call, cudaGetErrorString(status));
}

inline void cublas_check(cublasStatus_t status, const char* call) {
  if (status == CUBLAS_STATUS_SUCCESS) return;
  cuda_call_failed(call, cublasLtGetStatusString(status));
}

}  // namespace maxctx::kernels::cuda

// The call's own text names it in the message.
#define MAXCTX_CUDA_CHECK(call) ::maxctx::kernels::cuda::cuda_check((call), #call)
#define MAXCTX_CUBLAS_CHECK(call) ::maxctx::kernels::cuda::cublas_check((call), #call)
// After a kernel launch: a bad launch configuration is reported here, at the launch it belongs to.
#define MAXCTX_CUDA_LAUNCHED(kernel) \
  ::maxctx::kernels::cuda::cuda_check(cudaGetLastError(), "launching " kernel)

// The CUDA backend's failures, formatted on the host compiler's side (errors.cpp): .cu files
// call these instead of core/check.h's fail and MAXCTX_CHECK, which nvcc cannot compile.
#pragma once

namespace maxctx::kernels::cuda {

// "cuda: <call> failed: <error>", thrown as maxctx::Error.
[[noreturn]] void cuda_call_failed(const char* call, const char* error);
// A complete message, thrown as maxctx::Error.
[[noreturn]] void cuda_error(const char* message);

}  // namespace maxctx::kernels::cuda

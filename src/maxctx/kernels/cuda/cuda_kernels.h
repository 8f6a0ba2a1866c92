// The cuda backend's op table: kernels/kernels.h implemented on device memory (views with
// Device::kCuda) by the kernels of this folder and cuBLASLt, all on the legacy default stream
// (its synchronize, events and staged copies: stream.h).
// Plain C++, so kernels/backends.cpp can name it under MAXCTX_HAVE_CUDA.
#pragma once

#include "maxctx/kernels/kernels.h"

namespace maxctx::kernels::cuda {

// The backend, after checking that this process sees a GPU: otherwise one clear error with the
// runtime's reason ("the cuda backend needs a GPU: this process sees none (...)").
const Kernels& cuda_kernels();

}  // namespace maxctx::kernels::cuda

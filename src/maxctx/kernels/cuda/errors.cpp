#include "maxctx/kernels/cuda/errors.h"

#include "maxctx/core/check.h"

namespace maxctx::kernels::cuda {

void cuda_call_failed(const char* call, const char* error) {
  fail("cuda: {} failed: {}", call, error);
}

void cuda_error(const char* message) { fail("{}", message); }

}  // namespace maxctx::kernels::cuda

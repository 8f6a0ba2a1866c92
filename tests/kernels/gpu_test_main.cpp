// The main of GPU test binaries: runs the tests (each skips with the reason where this process
// sees no GPU), then exits 77 when there was no GPU, which ctest reports as skipped
// (SKIP_RETURN_CODE 77) instead of a pass that ran nothing. A failure of the tests that run
// without a GPU (argument checks) still fails.
#include <gtest/gtest.h>

#include <cstdio>

#include "maxctx/kernels/cuda/devices.h"

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  const int result = RUN_ALL_TESTS();
  const maxctx::kernels::cuda::CudaDevices devices = maxctx::kernels::cuda::visible_cuda_devices();
  if (result == 0 && devices.count() == 0) {
    std::printf("no GPU (%s): skipped\n", devices.error.c_str());
    return 77;
  }
  return result;
}

// Asking for the cuda backend where this process sees no GPU is one clear error naming the
// runtime's reason; where a GPU exists the backend is there (cuda_kernels_test tests its ops).
#include <gtest/gtest.h>

#include <string>

#include "maxctx/core/check.h"
#include "maxctx/kernels/cuda/devices.h"
#include "maxctx/kernels/kernels.h"

namespace maxctx::kernels {
namespace {

TEST(CudaBackend, WithoutAGpuFailsWithTheRuntimesReason) {
  const cuda::CudaDevices devices = cuda::visible_cuda_devices();
  if (devices.count() > 0) GTEST_SKIP() << "this process sees a GPU";
  try {
    backend(Device::kCuda);
    FAIL() << "the cuda backend was handed out without a GPU";
  } catch (const Error& e) {
    const std::string message = e.what();
    EXPECT_EQ(message,
              "the cuda backend needs a GPU: this process sees none (" + devices.error + ")");
    EXPECT_FALSE(devices.error.empty());
  }
}

TEST(CudaBackend, WithAGpuIsTheCudaBackend) {
  const cuda::CudaDevices devices = cuda::visible_cuda_devices();
  if (devices.count() == 0) GTEST_SKIP() << "no GPU: " << devices.error;
  const Kernels& kernels = backend(Device::kCuda);
  EXPECT_EQ(kernels.device(), Device::kCuda);
  EXPECT_STREQ(kernels.name(), "cuda");
  EXPECT_EQ(kernels.allocator().device(), Device::kCuda);
}

}  // namespace
}  // namespace maxctx::kernels

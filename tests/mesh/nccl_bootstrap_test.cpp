// make_nccl_communicator's refusals, which need no GPU and so run everywhere the CUDA build is:
// a GPU index the process does not see is one clear error (with no GPU at all, the runtime's
// own reason), and an empty axis is refused. The verbs themselves: nccl_communicator_test.
#include <gtest/gtest.h>

#include <stdexcept>
#include <string>

#include "maxctx/core/check.h"
#include "maxctx/mesh/communicator.h"
#include "maxctx/mesh/nccl_communicator.h"

namespace maxctx {
namespace {

// The message of the check that make_nccl_communicator(axis, device) fails with ("" if none).
std::string bootstrap_error(const Communicator& axis, int device) {
  set_check_handler([](const std::string& message) { throw std::runtime_error(message); });
  std::string error;
  try {
    const Communicator nccl = make_nccl_communicator(axis, device);
  } catch (const std::runtime_error& e) {
    error = e.what();
  }
  set_check_handler({});
  return error;
}

TEST(NcclBootstrap, AGpuThisProcessDoesNotSeeIsOneClearError) {
  const std::string error = bootstrap_error(Communicator::world(), 4096);
  // No GPU: the CUDA runtime's reason; GPUs: which one was asked for and how many there are.
  const bool named = error.find("CUDA device count failed") != std::string::npos ||
                     error.find("GPU 4096 asked for, this process sees") != std::string::npos;
  EXPECT_TRUE(named) << error;
  EXPECT_EQ(error.find('\n'), std::string::npos) << error;
}

TEST(NcclBootstrap, AnEmptyAxisIsRefused) {
  EXPECT_NE(bootstrap_error(Communicator(), 0).find("the axis communicator is empty"),
            std::string::npos);
}

}  // namespace
}  // namespace maxctx

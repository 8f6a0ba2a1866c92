// Fails a MAXCTX_CHECK on the last rank while every other rank waits in a barrier; run by
// check_abort.sh. Not a gtest binary: the point is what the process tree does, not an assertion.
// Without the abort hook the MpiRuntime installs, the waiting ranks would never return.
#include "maxctx/core/check.h"
#include "maxctx/mesh/communicator.h"
#include "maxctx/mesh/runtime.h"

int main(int argc, char** argv) {
  const maxctx::MpiRuntime runtime(&argc, &argv);
  const maxctx::Communicator world = maxctx::Communicator::world();
  MAXCTX_CHECK(world.rank() + 1 < world.size(), "the probe fails on purpose on rank {}",
               world.rank());
  world.barrier();
  return 0;
}

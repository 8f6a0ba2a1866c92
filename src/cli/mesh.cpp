#include "cli/commands.h"
#include "maxctx/core/check.h"
namespace maxctx::cli {
int run_mesh(const Args&) { fail("mesh: under construction"); }
}  // namespace maxctx::cli

#include "cli/commands.h"
#include "maxctx/core/check.h"
namespace maxctx::cli {
int run_mesh(const Args&) { fail("mesh: under construction"); }
int run_config_doc(const Args&) { fail("config-doc: under construction"); }
}  // namespace maxctx::cli

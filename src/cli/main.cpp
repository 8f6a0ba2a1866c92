// maxctx command line: `maxctx <command> <config.yml> [key=value ...]`.
// Parses, hands off to one function per subcommand, and turns a maxctx::Error into one line on
// rank 0 and a non-zero exit on every rank. No logic lives here.
#include <cstdio>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "maxctx/core/check.h"
#include "maxctx/core/log.h"
#include "maxctx/mesh/runtime.h"

int main(int argc, char** argv) {
  maxctx::MpiRuntime runtime(&argc, &argv);
  std::vector<std::string> args(argv + 1, argv + argc);
  try {
    return maxctx::cli::run_command(args);
  } catch (const maxctx::Error& e) {
    if (runtime.rank() == 0) std::fprintf(stderr, "maxctx: error: %s\n", e.what());
    return 1;
  }
}

// maxctx command line: `maxctx <command> <config.yml> [key=value ...]`.
// Parses, hands off to one function per subcommand, and turns a maxctx::Error (which every rank
// raises alike: config and input checks, and rank-0 work made collective by run_on_root) into
// one line on rank 0 and a non-zero exit on every rank. Any other exception may be this rank's
// alone (a filesystem error, an allocation that failed), so it ends the whole job from here
// (abort_job: one line naming the rank, then MPI_Abort), never std::terminate or a hang.
#include <cstdio>
#include <exception>
#include <new>
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
  } catch (const std::bad_alloc&) {
    maxctx::abort_job("out of memory (an allocation failed; a smaller model, batch or sequence?)");
  } catch (const std::exception& e) {
    maxctx::abort_job(e.what());
  }
}

// maxctx command line: `maxctx <command> <config.yml> [key=value ...]`.
// Parses, hands off to one function per subcommand, and turns a maxctx::Error into one line and a
// non-zero exit on every rank (MpiRuntime::finish_with_error: printed once by rank 0 where every
// rank raised it, as config checks and run_on_root do; by this rank, naming it, where only some
// ranks did, and then the job ends within seconds). Any other exception may be this rank's
// alone (a filesystem error, an allocation that failed), so it ends the whole job from here
// (abort_job: one line naming the rank, then MPI_Abort), never std::terminate or a hang.
#include <cstdio>
#include <exception>
#include <filesystem>
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
    return runtime.finish_with_error(e.what());
  } catch (const std::filesystem::filesystem_error& e) {
    // A path the user named that the system cannot resolve (a symlink loop, a name too long):
    // the input's fault, as a maxctx::Error is, and reported the same way.
    return runtime.finish_with_error(e.what());
  } catch (const std::bad_alloc&) {
    maxctx::abort_job("out of memory (an allocation failed; a smaller model, batch or sequence?)");
  } catch (const std::exception& e) {
    maxctx::abort_job(e.what());
  }
}

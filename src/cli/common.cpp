// load_command_config and mesh_spec_from (see common.h): the config resolved for the world's
// rank count, and the mesh spec read from it. The rank count comes from Communicator::world(),
// so no subcommand names MPI.
#include "cli/common.h"

#include "maxctx/core/check.h"
#include "maxctx/mesh/collective_watchdog.h"
#include "maxctx/mesh/communicator.h"

namespace maxctx::cli {

Config load_command_config(const Args& args, const char* command) {
  if (args.empty() || args[0].find('=') != std::string::npos) {
    fail("{} needs a config file first: maxctx {} configs/base.yml [key=value ...]", command,
         command);
  }
  const Config config =
      load_config(args[0], Args(args.begin() + 1, args.end()), Communicator::world().size());
  set_collective_timeout(config.collective_timeout_seconds);
  return config;
}

MeshSpec mesh_spec_from(const Config& config) {
  MeshSpec spec;
  spec.ici = config.derived.ici_parallelism;
  spec.dcn = config.derived.dcn_parallelism;
  spec.simulated_nodes = static_cast<int>(config.debug_simulated_nodes);
  return spec;
}

const kernels::Kernels& kernels_for(const Config&) { return kernels::backend(Device::kCpu); }

}  // namespace maxctx::cli

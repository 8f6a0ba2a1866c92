#include "cli/common.h"

#include <mpi.h>

#include "maxctx/core/check.h"

namespace maxctx::cli {

Config load_command_config(const Args& args, const char* command) {
  if (args.empty() || args[0].find('=') != std::string::npos) {
    fail("{} needs a config file first: maxctx {} configs/base.yml [key=value ...]", command,
         command);
  }
  int world_size = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &world_size);
  return load_config(args[0], Args(args.begin() + 1, args.end()), world_size);
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

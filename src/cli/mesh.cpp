// `maxctx mesh <config> [key=value ...]`: builds the device mesh the config describes on the
// ranks mpirun started, and prints from rank 0 every rank's host, node and coordinates and the
// size of every axis. The quickest check that a mesh and a launch agree.
#include <cstdio>

#include "cli/common.h"
#include "cli/hardware.h"
#include "maxctx/core/log.h"

namespace maxctx::cli {

int run_mesh(const Args& args) {
  const Config config = load_command_config(args, "mesh");
  const Mesh mesh = mesh_for(config);
  const std::string report = mesh_report(mesh);
  if (mesh.world_rank() == 0) std::fputs(report.c_str(), stdout);
  return 0;
}

int run_config(const Args& args) {
  const Config config = load_command_config(args, "config");
  log::info("{}", format_config(config));
  return 0;
}

}  // namespace maxctx::cli

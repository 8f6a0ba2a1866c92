// load_command_config and mesh_spec_from (see common.h): the config resolved for the world's
// rank count, and the mesh spec read from it. The rank count comes from Communicator::world(),
// so no subcommand names MPI.
#include "cli/common.h"

#include <filesystem>
#include <string>

#include "cli/hardware.h"
#include "maxctx/core/check.h"
#include "maxctx/kernels/traced_kernels.h"
#include "maxctx/mesh/collective_watchdog.h"
#include "maxctx/mesh/communicator.h"
#include "maxctx/mesh/root_task.h"
#include "maxctx/mesh/trace_file.h"
#include "maxctx/train/profiler.h"

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

const kernels::Kernels& kernels_for(const Config& config) {
  const kernels::Kernels& backend = hardware_kernels(config);
  return config.profiler.empty() ? backend : kernels::traced(backend);
}

void run_profiled(const Config& config, const Mesh& mesh, const char* command,
                  const std::function<void()>& work) {
  if (config.profiler.empty()) return work();
  train::check_trace_compiled_in(config.profiler);
  const std::filesystem::path base = config.base_output_directory.empty()
                                         ? std::filesystem::path("runs")
                                         : std::filesystem::path(config.base_output_directory);
  const std::filesystem::path path =
      base / (config.run_name.empty() ? std::string("maxctx_") + command : config.run_name) /
      "trace.json";
  run_on_root(mesh.world(), [&] { std::filesystem::create_directories(path.parent_path()); });
  start_trace(mesh.world());
  work();
  train::write_profile(mesh.world(), path, command);
}

}  // namespace maxctx::cli

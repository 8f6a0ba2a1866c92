// load_command_config and mesh_spec_from (see common.h): the config resolved for the world's
// rank count, and the mesh spec read from it. The rank count comes from Communicator::world(),
// so no subcommand names MPI.
#include "cli/common.h"

#include <fmt/format.h>

#include <filesystem>
#include <string>
#include <string_view>

#include "cli/hardware.h"
#include "maxctx/core/check.h"
#include "maxctx/core/log.h"
#include "maxctx/io/gguf.h"
#include "maxctx/io/output_path.h"
#include "maxctx/kernels/traced_kernels.h"
#include "maxctx/mesh/collective_watchdog.h"
#include "maxctx/mesh/communicator.h"
#include "maxctx/mesh/root_task.h"
#include "maxctx/mesh/trace_file.h"
#include "maxctx/model/gguf_import.h"
#include "maxctx/train/profiler.h"

namespace maxctx::cli {

Config load_command_config(const Args& args, const char* command) {
  if (args.empty() || args[0].find('=') != std::string::npos) {
    fail("{} needs a config file first: maxctx {} configs/base.yml [key=value ...]", command,
         command);
  }
  Config config =
      load_config(args[0], Args(args.begin() + 1, args.end()), Communicator::world().size());
  set_collective_timeout(config.collective_timeout_seconds);
  const std::string_view name(command);
  const bool inference = name == "decode" || name == "bench-inference";
  if (inference && !config.profiler.empty()) {
    run_on_root(Communicator::world(), [&] {
      io::check_output_file(profile_trace_path(config, command), "the profiler's trace");
    });
  }
  use_gguf_as_hf_directory(config, inference);
  return config;
}

std::filesystem::path profile_trace_path(const Config& config, const char* command) {
  const std::filesystem::path base = config.base_output_directory.empty()
                                         ? std::filesystem::path("runs")
                                         : std::filesystem::path(config.base_output_directory);
  return base / (config.run_name.empty() ? std::string("maxctx_") + command : config.run_name) /
         "trace.json";
}

void use_gguf_as_hf_directory(Config& config, bool loads_inference_model) {
  namespace fs = std::filesystem;
  const fs::path gguf = config.load_parameters_path;
  // Any .gguf name but a directory is the GGUF reader's, which refuses (core/input_file) what is
  // not a regular file: a FIFO, a device, a missing file, a symlink loop.
  std::error_code error;
  if (gguf.extension() != ".gguf" || fs::is_directory(gguf, error)) return;
  // One directory per file version: the name follows the path, size and modification time.
  const std::string identity =
      fmt::format("{}|{}|{}", fs::absolute(gguf).string(), fs::file_size(gguf, error),
                  fs::last_write_time(gguf, error).time_since_epoch().count());
  uint64_t hash = 14695981039346656037ull;  // FNV-1a: a stable name, not a security property
  for (const unsigned char c : identity) hash = (hash ^ c) * 1099511628211ull;
  const fs::path base = config.base_output_directory.empty()
                            ? fs::path("runs")
                            : fs::path(config.base_output_directory);
  // The engine with quantization=int8 loads the file's int8 form: its Q8_0 projections' codes as
  // stored where their rows allow (model/gguf_import.h), the rest quantized as on load.
  const bool int8 =
      loads_inference_model && config.quantization == "int8" && !config.checkpoint_is_quantized;
  const fs::path dir =
      base / "gguf" / fmt::format("{}-{:016x}{}", gguf.stem().string(), hash, int8 ? "-int8" : "");
  run_on_root(Communicator::world(), [&] {
    if (fs::exists(dir / "config.json")) {
      log::info("{}: reusing its {} form {}", gguf.string(), int8 ? "int8" : "Hugging Face",
                dir.string());
      return;
    }
    io::check_output_directory(
        dir.parent_path(),
        "the GGUF file's converted form's directory (base_output_directory/gguf)");
    const fs::path tmp = dir.string() + ".tmp";
    fs::remove_all(tmp);
    const io::GgufFile file(gguf);
    const std::string what =
        int8 ? model::write_int8_directory_from_gguf(kernels::backend(Device::kCpu), file, tmp)
             : model::write_hf_directory_from_gguf(file, tmp);
    fs::rename(tmp, dir);
    log::info("{}: {}, into {}", gguf.string(), what, dir.string());
  });
  config.load_parameters_path = dir.string();
  if (int8) config.checkpoint_is_quantized = true;
  if (config.tokenizer_path.empty() && fs::exists(dir / "tokenizer.json")) {
    config.tokenizer_path = (dir / "tokenizer.json").string();
  }
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
  const std::filesystem::path path = profile_trace_path(config, command);
  run_on_root(mesh.world(), [&] { std::filesystem::create_directories(path.parent_path()); });
  start_trace(mesh.world());
  work();
  train::write_profile(mesh.world(), path, command);
}

}  // namespace maxctx::cli

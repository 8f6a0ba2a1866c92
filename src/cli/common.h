// What every subcommand does first: read `<config.yml> [key=value ...]`, resolve the config for
// this many ranks and build the mesh. Errors are maxctx::Error; main() prints them once.
#pragma once

#include <functional>

#include "cli/commands.h"
#include "maxctx/config/config.h"
#include "maxctx/kernels/kernels.h"
#include "maxctx/mesh/mesh.h"

namespace maxctx::cli {

// The config file and overrides of `args`; the world size sets the device count. Then
// use_gguf_as_hf_directory.
Config load_command_config(const Args& args, const char* command);
// load_parameters_path=<file.gguf>: rank 0 writes its Hugging Face form once
// (model/gguf_import.h) into <base_output_directory, else runs>/gguf/<stem>-<hash of the path,
// size and time>/, reused after that, and the config loads that directory instead; its
// tokenizer.json becomes tokenizer_path when none is given. Anything else is left as it is.
void use_gguf_as_hf_directory(Config& config);
MeshSpec mesh_spec_from(const Config& config);
// The op table the run computes with: the backend of `hardware` (cli/hardware.h), inside trace
// spans when `profiler` is set.
const kernels::Kernels& kernels_for(const Config& config);
// Runs `work`; with `profiler` set (xplane, nsys) traces it on every rank into
// <base_output_directory>/<run_name, or maxctx_<command>>/trace.json and prints the summary.
void run_profiled(const Config& config, const Mesh& mesh, const char* command,
                  const std::function<void()>& work);

}  // namespace maxctx::cli

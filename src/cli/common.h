// What every subcommand does first: read `<config.yml> [key=value ...]`, resolve the config for
// this many ranks and build the mesh. Errors are maxctx::Error; main() prints them once.
#pragma once

#include <filesystem>
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
// A command that `loads_inference_model` (decode, bench-inference) with quantization=int8 gets the
// file's int8 form instead (<...>-int8/, checkpoint_is_quantized set: Q8_0 codes as stored where
// a row's block scales allow, model/gguf_import.h).
void use_gguf_as_hf_directory(Config& config, bool loads_inference_model);
MeshSpec mesh_spec_from(const Config& config);
// The op table the run computes with: the backend of `hardware` (cli/hardware.h), inside trace
// spans when `profiler` is set.
const kernels::Kernels& kernels_for(const Config& config);
// <base_output_directory, else runs>/<run_name, else maxctx_<command>>/trace.json: where
// run_profiled writes (checked by load_command_config before decode or bench-inference starts).
std::filesystem::path profile_trace_path(const Config& config, const char* command);
// Runs `work`; with `profiler` set (xplane, nsys) traces it on every rank into
// <base_output_directory>/<run_name, or maxctx_<command>>/trace.json and prints the summary.
void run_profiled(const Config& config, const Mesh& mesh, const char* command,
                  const std::function<void()>& work);

}  // namespace maxctx::cli

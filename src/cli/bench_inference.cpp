// `maxctx bench-inference <config> [key=value ...]`: MaxText's inference_microbenchmark.
// For each length in inference_microbenchmark_prefill_lengths: prefill time and TFLOP/s per
// device; then the autoregressive step after a prefill of the last length: step time, time per
// sequence, throughput and bandwidth per device; model and cache sizes. Prints MaxText's lines
// and the JSON from rank 0, and writes the JSON to inference_microbenchmark_log_file_path when set
// (that file and tokenizer_path are checked before the benchmark runs).
#include <filesystem>
#include <fstream>

#include "cli/common.h"
#include "cli/hardware.h"
#include "maxctx/core/check.h"
#include "maxctx/core/log.h"
#include "maxctx/infer/engine.h"
#include "maxctx/infer/microbenchmark.h"
#include "maxctx/infer/model_source.h"
#include "maxctx/io/output_path.h"
#include "maxctx/mesh/root_task.h"
#include "maxctx/tokenizer/tokenizer.h"

namespace maxctx::cli {

int run_bench_inference(const Args& args) {
  const Config config = load_command_config(args, "bench-inference");
  log::info("{}", format_config(config));
  const Mesh mesh = mesh_for(config);
  const infer::InferenceSettings settings = infer::inference_settings_from(config, mesh);
  const infer::MicrobenchmarkOptions options = infer::microbenchmark_options(config);
  const std::string& path = config.inference_microbenchmark_log_file_path;
  if (!path.empty()) {
    // Checked before the benchmark, not after minutes of it (every rank ends with rank 0's error).
    run_on_root(mesh.world(),
                [&] { io::check_output_file(path, "inference_microbenchmark_log_file_path"); });
  }
  if (!config.tokenizer_path.empty()) {
    // MaxText's benchmark builds the tokenizer too; its prompts are synthetic ids, so here the
    // file is only resolved (assets/<name> included) and read, and a bad one is refused early.
    const auto tokenizer = tokenizer::load_tokenizer(config.tokenizer_path);
    log::info("tokenizer: {} ({}, {} tokens; the benchmark's prompts are synthetic ids)",
              tokenizer::resolve_tokenizer_path(config.tokenizer_path), tokenizer->kind(),
              tokenizer->vocab_size());
  }
  infer::InferenceModel model = infer::load_inference_model(config, kernels_for(config), mesh);
  log::info("model: {}", model.source);
  infer::InferenceEngine engine(kernels_for(config), settings, model.config,
                                std::move(model.weights), mesh, std::move(model.int8));
  nlohmann::json results;
  run_profiled(config, mesh, "bench-inference",
               [&] { results = infer::run_inference_microbenchmark(engine, options); });
  if (!path.empty()) {
    // Rank 0 writes; every rank ends with its error if it cannot.
    run_on_root(mesh.world(), [&] {
      const std::filesystem::path parent = std::filesystem::path(path).parent_path();
      if (!parent.empty()) std::filesystem::create_directories(parent);
      std::ofstream out(path);
      out << results.dump(2) << "\n";
      if (!out) fail("inference_microbenchmark_log_file_path = '{}' cannot be written", path);
    });
  }
  log::info("{}", results.dump(2));
  return 0;
}

}  // namespace maxctx::cli

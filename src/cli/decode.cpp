// `maxctx decode <config> load_parameters_path=<dir> prompt="..." [key=value ...]`: MaxText's
// decode.py. Builds the inference engine on the context_autoregressive axis, prefills the
// prompt into every decode slot (MaxText's global batch) and decodes until EOS or
// max_target_length, then prints slot 0's output from rank 0. With tokenizer_path the prompt is
// text and the output is text; without it the prompt is space-separated token ids and the
// output prints ids.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <chrono>
#include <sstream>

#include "cli/common.h"
#include "cli/hardware.h"
#include "maxctx/core/check.h"
#include "maxctx/core/log.h"
#include "maxctx/infer/engine.h"
#include "maxctx/infer/model_source.h"
#include "maxctx/tokenizer/tokenizer.h"

namespace maxctx::cli {
namespace {

std::vector<int32_t> parse_token_ids(const std::string& prompt) {
  std::vector<int32_t> ids;
  std::istringstream in(prompt);
  std::string word;
  while (in >> word) {
    try {
      size_t used = 0;
      const long long id = std::stoll(word, &used);
      if (used != word.size() || id < 0 || id > INT32_MAX) throw std::invalid_argument(word);
      ids.push_back(static_cast<int32_t>(id));
    } catch (const std::exception&) {
      fail(
          "prompt '{}' is not token ids ('{}'): without tokenizer_path the prompt is "
          "space-separated ids, e.g. prompt=\"1 15 27\"; set tokenizer_path for text",
          prompt, word);
    }
  }
  return ids;
}

// The text of `ids`, with ids the tokenizer does not have (a model vocabulary padded past the
// tokenizer's) shown as <id N> between decoded runs, so that one such id does not cost the whole
// output (issue #34 N13).
std::string detokenize(const tokenizer::Tokenizer& tokenizer, std::span<const int32_t> ids) {
  std::string text;
  size_t begin = 0;
  for (size_t i = 0; i <= ids.size(); ++i) {
    if (i < ids.size() && ids[i] >= 0 && ids[i] < tokenizer.vocab_size()) continue;
    text += tokenizer.decode(ids.subspan(begin, i - begin));
    if (i < ids.size()) text += fmt::format("<id {}>", ids[i]);
    begin = i + 1;
  }
  return text;
}

}  // namespace

int run_decode(const Args& args) {
  const Config config = load_command_config(args, "decode");
  log::info("{}", format_config(config));
  const Mesh mesh = mesh_for(config);
  infer::InferenceSettings settings = infer::inference_settings_from(config, mesh);
  std::unique_ptr<tokenizer::Tokenizer> tokenizer;
  std::vector<int32_t> prompt;
  if (config.tokenizer_path.empty()) {
    prompt = parse_token_ids(config.prompt);
  } else {
    tokenizer = tokenizer::load_tokenizer(config.tokenizer_path);
    prompt = tokenizer->encode(config.prompt, config.add_bos);
    if (tokenizer->eos_id() >= 0) settings.eos_id = tokenizer->eos_id();
  }
  infer::InferenceModel model = infer::load_inference_model(config, kernels_for(config), mesh);
  if (tokenizer != nullptr && tokenizer->vocab_size() > model.config.vocab_size) {
    fail("the tokenizer at '{}' has {} tokens, the model only {}: they do not belong together",
         config.tokenizer_path, tokenizer->vocab_size(), model.config.vocab_size);
  }
  if (tokenizer != nullptr && tokenizer->vocab_size() < model.config.vocab_size) {
    log::warn(
        "the tokenizer at '{}' has {} tokens, the model {}: generated ids past the tokenizer's "
        "are shown as <id N>",
        config.tokenizer_path, tokenizer->vocab_size(), model.config.vocab_size);
  }
  log::info("model: {}", model.source);
  infer::InferenceEngine engine(kernels_for(config), settings, model.config,
                                std::move(model.weights), mesh, std::move(model.int8));
  const std::vector<std::vector<int32_t>> prompts(static_cast<size_t>(settings.slots), prompt);
  const auto start = std::chrono::steady_clock::now();
  infer::GenerateResult result;
  run_profiled(config, mesh, "decode", [&] { result = engine.generate(prompts); });
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const std::vector<int32_t>& out = result.tokens[0];
  int64_t generated = 0;
  for (const auto& tokens : result.tokens) generated += static_cast<int64_t>(tokens.size());
  log::info("{} slots x up to {} tokens on context_autoregressive = {}: {} tokens in {:.3f} s",
            settings.slots, out.size(), engine.ca(), generated, seconds);
  if (const auto transfers = engine.decode_transfers(); transfers && transfers->steps > 0) {
    // The sampled rows' logits, which the host's sampler reads, are a decode step's readback.
    log::info("device readbacks per decode step: {:.2f} ({:.2f} host waits), over {} steps",
              static_cast<double>(transfers->counts.readbacks) / transfers->steps,
              static_cast<double>(transfers->counts.host_waits) / transfers->steps,
              transfers->steps);
  }
  if (tokenizer != nullptr) {
    log::info("Input `{}` -> `{}`", config.prompt, detokenize(*tokenizer, out));
  } else {
    log::info("Input `{}` -> `{}`", fmt::join(prompt, " "), fmt::join(out, " "));
  }
  return 0;
}

}  // namespace maxctx::cli

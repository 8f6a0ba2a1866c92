// `maxctx export <config> load_parameters_path=<checkpoint> base_output_directory=<out>
//  [tokenizer_path=<file>]`: a trained maxctx checkpoint out as a Hugging Face Llama directory.
//
// <checkpoint> is one checkpoint (<run>/checkpoints/<step>) or a run directory (its latest
// complete checkpoint). The model is the one the checkpoint records (model/model_record.h): a
// model key given on the command line must agree with it (else an error naming both values), and
// config.json carries the recorded values, never the config's defaults. A checkpoint written
// before the record existed is read with the config's model keys. Either way every tensor must
// be in the checkpoint with its shape, and the checkpoint must hold no other, so a model that does
// not describe the checkpoint is an error, not a silent partial export. Writes <out>/config.json
// (LlamaConfig form, MistralConfig with a sliding window, MixtralConfig for decoder_block mixtral)
// and <out>/model.safetensors (F32, Hugging Face names; above export_max_shard_size bytes, files
// model-0000i-of-0000n.safetensors listed by model.safetensors.index.json, as transformers
// writes them), plus the tokenizer files when tokenizer_path is set. What it writes loads back
// through llama_config_from_hf and load_hf_weights bit-exactly. One process, streaming: each
// tensor is assembled from the checkpoint's slices (whatever mesh saved it) just before it is
// written, so the export holds one tensor at a time, not the model (quantization=int8 still
// holds the model: its quantizer works on the whole weight list).
#include <fmt/format.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>

#include "cli/common.h"
#include "maxctx/core/check.h"
#include "maxctx/core/finite.h"
#include "maxctx/core/input_file.h"
#include "maxctx/core/log.h"
#include "maxctx/io/output_path.h"
#include "maxctx/io/safetensors.h"
#include "maxctx/io/sliced_tensors.h"
#include "maxctx/kernels/kernels.h"
#include "maxctx/mesh/communicator.h"
#include "maxctx/model/hf_import.h"
#include "maxctx/model/llama_config.h"
#include "maxctx/model/model_record.h"
#include "maxctx/model/quantized_checkpoint.h"
#include "maxctx/model/weights.h"
#include "maxctx/tokenizer/tokenizer.h"
#include "maxctx/train/checkpoint.h"

namespace maxctx::cli {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

constexpr const char* kUsage =
    "usage: maxctx export <config.yml> load_parameters_path=<checkpoint> "
    "base_output_directory=<out>\n"
    "                     [tokenizer_path=<tokenizer file>] [quantization=int8] [model keys "
    "...]\n\n"
    "Writes a maxctx training checkpoint as a Hugging Face Llama directory <out>/: config.json,\n"
    "model.safetensors (F32; above export_max_shard_size bytes several files and\n"
    "model.safetensors.index.json) and, with tokenizer_path, the tokenizer (tokenizer.model for\n"
    "SentencePiece; tokenizer.json and tokenizer_config.json, or GPT-2's vocab.json +\n"
    "merges.txt). <checkpoint> is <run>/checkpoints/<step> or a run directory (latest step).\n"
    "The model is the one the checkpoint records; model keys given must agree with it (a\n"
    "mismatch is an error naming both values). A checkpoint that records no model (an older\n"
    "one) is read with the config's model keys. Runs as one process.\n"
    "quantization=int8 writes the projections as int8 codes and scales instead (a checkpoint\n"
    "that decode and bench-inference load with checkpoint_is_quantized=true quantization=int8).\n";

fs::path resolve_checkpoint(const std::string& path_text) {
  if (path_text.empty()) {
    fail("export needs load_parameters_path=<run>/checkpoints/<step> (or a run directory)");
  }
  const fs::path path(path_text);
  if (fs::exists(path / io::kSliceIndexName) || fs::exists(path / "model.safetensors")) {
    return path;
  }
  if (fs::is_directory(path / "checkpoints")) {
    const std::optional<int64_t> step = train::latest_checkpoint_step(path);
    if (!step) fail("load_parameters_path {}: the run has no complete checkpoint", path_text);
    return train::checkpoint_directory(path, *step);
  }
  fail(
      "load_parameters_path {}: neither a checkpoint (index.json or model.safetensors) nor a run "
      "directory",
      path_text);
}

void write_text(const fs::path& path, const std::string& text) {
  const fs::path tmp = path.string() + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!(out << text) || !out.flush()) fail("{}: cannot write", tmp.string());
  }
  fs::rename(tmp, path);
}

// The weights as Hugging Face safetensors: one file, or files of at most `max_file_bytes`
// (a tensor larger than that alone in its file) listed by model.safetensors.index.json. Each
// tensor is read from `tensors` into one reused buffer just before it is written.
void write_hf_files(const io::SliceReader& tensors, const std::vector<model::WeightSpec>& specs,
                    const fs::path& out, int64_t max_file_bytes) {
  std::vector<std::vector<size_t>> files(1);
  int64_t file_bytes = 0, total_bytes = 0;
  for (size_t i = 0; i < specs.size(); ++i) {
    const int64_t bytes = specs[i].numel() * static_cast<int64_t>(sizeof(float));
    if (!files.back().empty() && file_bytes + bytes > max_file_bytes) {
      files.emplace_back();
      file_bytes = 0;
    }
    files.back().push_back(i);
    file_bytes += bytes;
    total_bytes += bytes;
  }
  const auto file_name = [&](size_t f) {
    return files.size() == 1
               ? std::string("model.safetensors")
               : fmt::format("model-{:05d}-of-{:05d}.safetensors", f + 1, files.size());
  };
  std::vector<float> buffer;
  json weight_map = json::object();
  for (size_t f = 0; f < files.size(); ++f) {
    std::vector<io::TensorHeader> headers;
    for (const size_t i : files[f]) {
      const model::WeightSpec& s = specs[i];
      headers.push_back(
          {s.name, io::StDType::kF32,
           s.cols == 1 ? std::vector<int64_t>{s.rows} : std::vector<int64_t>{s.rows, s.cols}});
      weight_map[s.name] = file_name(f);
    }
    io::write_safetensors_streamed(out / file_name(f), headers, {{"format", "pt"}}, [&](size_t k) {
      const model::WeightSpec& s = specs[files[f][k]];
      buffer.resize(static_cast<size_t>(s.numel()));
      const TensorView view = TensorView::of(buffer.data(), s.numel());
      tensors.read(s.name, io::Rect{0, 0, s.rows, s.cols}, view);
      if (const std::optional<int64_t> bad = first_non_finite(view)) {
        fail("tensor '{}' holds a non-finite value (NaN or Inf) at element {}", s.name, *bad);
      }
      return std::as_bytes(std::span<const float>(buffer));
    });
  }
  if (files.size() > 1) {
    const json index = {{"metadata", {{"total_size", total_bytes}}}, {"weight_map", weight_map}};
    write_text(out / "model.safetensors.index.json", index.dump(2) + "\n");
  }
}

json hf_config(const Config& c, const model::LlamaConfig& m,
               const tokenizer::Tokenizer* tokenizer) {
  const bool mistral = m.sliding_window > 0;
  json j;
  if (m.moe) {
    // MixtralConfig: its experts, no attention_bias/mlp_bias fields, the router noise off.
    j["architectures"] = {"MixtralForCausalLM"};
    j["model_type"] = "mixtral";
    j["num_local_experts"] = m.num_experts;
    j["num_experts_per_tok"] = m.num_experts_per_tok;
    j["router_jitter_noise"] = 0.0;
  } else {
    j["architectures"] = {mistral ? "MistralForCausalLM" : "LlamaForCausalLM"};
    j["model_type"] = mistral ? "mistral" : "llama";
  }
  j["hidden_size"] = m.emb_dim;
  j["intermediate_size"] = m.mlp_dim;
  j["num_attention_heads"] = m.num_query_heads;
  j["num_key_value_heads"] = m.num_kv_heads;
  j["head_dim"] = m.head_dim;
  j["num_hidden_layers"] = m.num_layers;
  j["vocab_size"] = m.vocab_size;
  // The float's shortest decimal (1e-06, as the config or config.json gave it): HF rounds it to
  // the same float when it loads.
  j["rms_norm_eps"] = std::stod(fmt::format("{}", m.norm_eps));
  j["rope_theta"] = m.rope.theta;
  if (m.rope.scaling == kernels::RopeScaling::kLlama3) {
    j["rope_scaling"] = {{"rope_type", "llama3"},
                         {"factor", m.rope.factor},
                         {"low_freq_factor", m.rope.low_freq_factor},
                         {"high_freq_factor", m.rope.high_freq_factor},
                         {"original_max_position_embeddings",
                          static_cast<int64_t>(m.rope.original_max_position_embeddings)}};
  } else {
    j["rope_scaling"] = nullptr;
  }
  if (mistral) j["sliding_window"] = m.sliding_window;
  if (m.moe && !mistral) j["sliding_window"] = nullptr;
  j["tie_word_embeddings"] = m.tie_embeddings;
  j["max_position_embeddings"] = c.max_target_length;
  j["hidden_act"] = "silu";
  if (!m.moe) {
    j["attention_bias"] = false;
    j["mlp_bias"] = false;
  }
  j["torch_dtype"] = "float32";
  if (tokenizer != nullptr) {
    if (tokenizer->bos_id() >= 0) j["bos_token_id"] = tokenizer->bos_id();
    if (tokenizer->eos_id() >= 0) j["eos_token_id"] = tokenizer->eos_id();
  }
  return j;
}

// The tokenizer's files under the names a Hugging Face directory uses.
std::vector<std::pair<fs::path, std::string>> tokenizer_files(
    const fs::path& path, const tokenizer::Tokenizer& tokenizer) {
  if (fs::is_directory(path)) {
    fail("tokenizer_path {}: export copies one tokenizer file; name the file", path.string());
  }
  if (tokenizer.kind() == "sentencepiece") return {{path, "tokenizer.model"}};
  const json root =
      json::parse(read_input_file(path, "tokenizer file", tokenizer::kMaxTokenizerFileBytes));
  if (root.contains("model")) {
    std::vector<std::pair<fs::path, std::string>> files = {{path, "tokenizer.json"}};
    const fs::path config = path.parent_path() / "tokenizer_config.json";
    if (fs::exists(config)) files.emplace_back(config, "tokenizer_config.json");
    return files;
  }
  for (const char* merges : {"vocab.bpe", "merges.txt"}) {
    if (fs::exists(path.parent_path() / merges)) {
      return {{path, "vocab.json"}, {path.parent_path() / merges, "merges.txt"}};
    }
  }
  fail("tokenizer_path {}: cannot tell which files make up this tokenizer", path.string());
}

}  // namespace

int run_export(const Args& args) {
  if (!args.empty() && (args[0] == "--help" || args[0] == "-h")) {
    if (log::rank() == 0) std::fputs(kUsage, stdout);
    return 0;
  }
  const int world_size = Communicator::world().size();
  if (world_size != 1) {
    fail("export runs as one process (got {} ranks); run it without mpirun", world_size);
  }
  const Config c = load_command_config(args, "export");
  if (c.base_output_directory.empty()) {
    fail("export needs base_output_directory=<directory for config.json and model.safetensors>");
  }
  const fs::path out(c.base_output_directory);
  io::check_output_directory(out, "base_output_directory");
  const fs::path checkpoint = resolve_checkpoint(c.load_parameters_path);
  const model::LlamaConfig m = model::checkpoint_model(c, checkpoint);
  const std::vector<model::WeightSpec> specs = model::llama_weight_specs(m);

  // Every weight of the model, and no other weight, must be in the checkpoint (its optimizer
  // moments are not exported).
  const io::SliceReader tensors(io::open_tensor_index(checkpoint), checkpoint.string());
  std::set<std::string> extra;
  for (const auto& [name, t] : tensors.index()) {
    if (!name.starts_with("adam_m.") && !name.starts_with("adam_v.")) extra.insert(name);
  }
  for (const model::WeightSpec& s : specs) extra.erase(s.name);
  if (!extra.empty()) {
    fail(
        "{}: the checkpoint holds {} tensors the config's model does not have (first: {}); the "
        "model keys must be the ones it was trained with",
        checkpoint.string(), extra.size(), *extra.begin());
  }
  model::check_weight_tensors(tensors, specs);

  std::unique_ptr<tokenizer::Tokenizer> tokenizer;
  if (!c.tokenizer_path.empty()) {
    tokenizer = tokenizer::load_tokenizer(c.tokenizer_path);
    if (tokenizer->vocab_size() > m.vocab_size) {
      fail("tokenizer_path {} has {} tokens, more than the model's vocab_size {}", c.tokenizer_path,
           tokenizer->vocab_size(), m.vocab_size);
    }
  }

  fs::create_directories(out);
  if (c.quantization == "int8") {
    // A checkpoint saved already quantized (checkpoint_is_quantized=true loads it). With tied
    // embeddings the head is the embedding, kept in F32 as quantizing on load keeps it.
    // The parameters are a host array: quantized by the cpu backend whatever `hardware` says.
    std::vector<float> params(static_cast<size_t>(model::total_numel(specs)));
    model::load_weights(kernels::backend(Device::kCpu), specs,
                        TensorView::of(params.data(), model::total_numel(specs)), tensors);
    model::write_int8_checkpoint(kernels::backend(Device::kCpu), specs, params.data(), out);
  } else {
    write_hf_files(tensors, specs, out, c.export_max_shard_size);
  }
  write_text(out / "config.json", hf_config(c, m, tokenizer.get()).dump(2) + "\n");
  std::string copied;
  if (tokenizer) {
    for (const auto& [from, name] :
         tokenizer_files(tokenizer::resolve_tokenizer_path(c.tokenizer_path), *tokenizer)) {
      fs::copy_file(from, out / name, fs::copy_options::overwrite_existing);
      copied += ", " + name;
    }
  }
  log::info("exported {} ({} tensors, {} parameters) to {}: config.json, the weights{}",
            checkpoint.string(), specs.size(), model::total_numel(specs), out.string(), copied);
  return 0;
}

}  // namespace maxctx::cli

#include "maxctx/train/initial_state.h"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <chrono>
#include <optional>
#include <random>
#include <thread>

#include "maxctx/core/check.h"
#include "maxctx/core/input_file.h"
#include "maxctx/core/log.h"
#include "maxctx/io/durable_file.h"
#include "maxctx/mesh/root_task.h"
#include "maxctx/model/hf_import.h"
#include "maxctx/model/model_record.h"
#include "maxctx/train/checkpoint.h"

namespace maxctx::train {
namespace {

namespace fs = std::filesystem;

// FNV-1a over what a rank is about to start from: the step, the data position and every tensor's
// index entry (file, rectangle, byte range). Equal on every rank that reads the same checkpoint.
int64_t starting_state_digest(const StartingState& s) {
  std::string text = fmt::format("{} {} {}\n", s.step, s.data_position, s.with_moments);
  if (s.tensors) text += io::slice_index_json(s.tensors->index());
  uint64_t hash = 14695981039346656037ull;
  for (const char c : text) {
    hash = (hash ^ static_cast<unsigned char>(c)) * 1099511628211ull;
  }
  return static_cast<int64_t>(hash);
}

bool set_explicitly(const Config& c, std::string_view key) {
  return std::find(c.explicit_keys.begin(), c.explicit_keys.end(), key) != c.explicit_keys.end();
}

// The RoPE keys the user set beat the checkpoint's config.json.
void apply_explicit_rope_keys(const Config& c, model::LlamaConfig& m) {
  const kernels::RopeParams from_keys = model::llama_config_from(c).rope;
  if (set_explicitly(c, "rope_type")) {
    const double theta = m.rope.theta;
    m.rope = from_keys;
    m.rope.theta = theta;
  }
  if (set_explicitly(c, "rope_max_timescale")) m.rope.theta = from_keys.theta;
  if (m.rope.scaling != kernels::RopeScaling::kLlama3) return;
  if (set_explicitly(c, "rope_scaling_factor")) m.rope.factor = c.rope_scaling_factor;
  if (set_explicitly(c, "rope_low_freq_factor")) m.rope.low_freq_factor = c.rope_low_freq_factor;
  if (set_explicitly(c, "rope_high_freq_factor")) {
    m.rope.high_freq_factor = c.rope_high_freq_factor;
  }
  if (set_explicitly(c, "rope_original_max_position_embeddings")) {
    m.rope.original_max_position_embeddings =
        static_cast<double>(c.rope_original_max_position_embeddings);
  }
}

// Rank 0 writes a file holding a random token into the run directory and every rank reads it
// back: a rank that sees another directory (a node-local disk) is an error at the start, naming
// it, rather than a fresh start beside the others and a failure at the first save. A rank waits
// up to 5 s for the file, for a network filesystem's lookup cache.
void check_run_directory_shared(const fs::path& run_dir, const Communicator& world) {
  if (world.size() == 1) return;
  std::random_device random;
  const uint64_t token = (uint64_t{random()} << 32) ^ random() ^ static_cast<uint64_t>(::getpid());
  auto shared = static_cast<int64_t>(token);
  world.broadcast(std::span<int64_t>(&shared, 1), 0);
  const std::string text = std::to_string(shared);
  const fs::path file =
      run_dir / fmt::format(".maxctx-shared-{:016x}", static_cast<uint64_t>(shared));
  run_on_root(world, [&] {
    fs::create_directories(run_dir);
    io::write_synced_text(file, text);
  });
  const auto remove_token = [&] {
    std::error_code ignored;
    if (world.rank() == 0) fs::remove(file, ignored);
  };
  try {
    run_on_every_rank(world, [&] {
      const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
      std::error_code absent;
      while (!fs::exists(fs::symlink_status(file, absent)) &&
             std::chrono::steady_clock::now() < deadline) {
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
      }
      if (!fs::exists(fs::symlink_status(file, absent)) ||
          read_input_file(file, "run directory token", 64) != text) {
        fail(
            "the run directory '{}' here is not the one rank 0 sees (the token file rank 0 wrote, "
            "{}, is missing or differs): the run directory must be on storage every rank sees "
            "alike",
            run_dir.string(), file.filename().string());
      }
    });
  } catch (...) {
    remove_token();
    throw;
  }
  remove_token();
}

fs::path hf_config_json(const Config& c) {
  if (c.load_parameters_path.empty()) return {};
  const fs::path json = fs::path(c.load_parameters_path) / "config.json";
  std::error_code error;  // a looping or dangling name is there: opening it says what it is
  return fs::exists(fs::symlink_status(json, error)) ? json : fs::path();
}

fs::path without_trailing_separator(fs::path p) {
  p = p.lexically_normal();
  if (p.filename().empty() && p.has_parent_path()) p = p.parent_path();
  return p;
}

// A checkpoint directory <run>/checkpoints/<step> as (run directory, step); a run directory as
// (itself, its latest checkpoint).
std::pair<fs::path, int64_t> locate_checkpoint(const std::string& key, const std::string& text) {
  const fs::path path = without_trailing_separator(text);
  if (!fs::is_directory(path)) {
    fail("{} = '{}' is not a directory: give <run>/checkpoints/<step> or a run directory", key,
         text);
  }
  if (fs::exists(path / "state.json")) {
    const std::string name = path.filename().string();
    int64_t step = -1;
    const auto [end, error] = std::from_chars(name.data(), name.data() + name.size(), step);
    if (error != std::errc() || end != name.data() + name.size() || step < 0 ||
        path.parent_path().filename() != "checkpoints") {
      fail("{} = '{}' holds state.json but is not named <run>/checkpoints/<step>", key, text);
    }
    return {path.parent_path().parent_path(), step};
  }
  const std::optional<int64_t> latest = latest_checkpoint_step(path);
  if (!latest) {
    fail(
        "{} = '{}' is neither a checkpoint directory (no state.json) nor a run directory with a "
        "complete checkpoint under checkpoints/",
        key, text);
  }
  return {path, *latest};
}

// The model of a Hugging Face config.json, with the config's precision and its RoPE keys given
// on the command line over the file's.
model::LlamaConfig hf_training_model(const Config& c, const fs::path& json) {
  model::LlamaConfig m = model::llama_config_from_hf(json);
  model::apply_precision(c, m);
  const kernels::RopeParams from_json = m.rope;
  apply_explicit_rope_keys(c, m);
  // The config printout above shows the base_* / head_dim / vocab_size keys, which the file's
  // model replaces: its own dimensions are said here.
  log::info(
      "model from {} (its dimensions replace the config's model keys printed above): vocab {}, "
      "emb {}, layers {}, heads {}/{} kv, head_dim {}, mlp {}{}, {} embeddings; RoPE theta {}{}{}",
      json.string(), m.vocab_size, m.emb_dim, m.num_layers, m.num_query_heads, m.num_kv_heads,
      m.head_dim, m.mlp_dim, m.moe ? fmt::format(" x {} experts", m.num_experts) : std::string(),
      m.tie_embeddings ? "tied" : "untied", m.rope.theta,
      m.rope.scaling == kernels::RopeScaling::kLlama3
          ? fmt::format(", Llama 3 scaling x{}", m.rope.factor)
          : std::string(),
      m.rope.theta != from_json.theta || m.rope.scaling != from_json.scaling ||
              m.rope.factor != from_json.factor
          ? " (RoPE keys of the command line over config.json's)"
          : "");
  return m;
}

// The run's model against the one checkpoint `dir` records (see the file comment); nullopt:
// the checkpoint has no record.
void check_recorded_model(const Config& c, const std::optional<model::LlamaConfig>& recorded,
                          const model::LlamaConfig& running, const fs::path& dir,
                          bool explicit_rope_wins) {
  if (!recorded) {
    log::info(
        "checkpoint '{}' does not record its model (written before maxctx recorded it): read "
        "as this run's model",
        dir.string());
    return;
  }
  model::LlamaConfig compared = running;
  if (explicit_rope_wins) {
    for (const std::string& key : model::rope_keys()) {
      if (set_explicitly(c, key)) compared.rope = recorded->rope;
    }
  }
  if (const std::optional<std::string> difference = model::model_difference(*recorded, compared)) {
    fail("checkpoint '{}': {}; train with the model the checkpoint holds", dir.string(),
         *difference);
  }
}

}  // namespace

model::LlamaConfig training_model_config(const Config& c) {
  const fs::path json = hf_config_json(c);
  model::LlamaConfig m = json.empty() ? model::llama_config_from(c) : hf_training_model(c, json);
  m.vocab_tiles = c.num_vocab_tiling;  // training only: inference and check-logits stay untiled
  return m;
}

Config with_model_dimensions(Config c, const model::LlamaConfig& m) {
  c.vocab_size = m.vocab_size;
  c.head_dim = m.head_dim;
  c.derived.emb_dim = m.emb_dim;
  c.derived.num_query_heads = m.num_query_heads;
  c.derived.num_kv_heads = m.num_kv_heads;
  c.derived.mlp_dim = m.mlp_dim;
  c.derived.num_decoder_layers = m.num_layers;
  // A Mixtral directory loaded under a dense config: the FLOP count reads the experts.
  c.num_experts = m.num_experts;
  c.num_experts_per_tok = m.num_experts_per_tok;
  if (m.moe) c.decoder_block = "mixtral";
  return c;
}

StartingState load_starting_state(const Config& c, const fs::path& run_dir,
                                  const model::LlamaConfig& model,
                                  const std::vector<model::WeightSpec>& global_specs,
                                  const Communicator& world) {
  if (!c.load_parameters_path.empty() && !c.load_full_state_path.empty()) {
    fail(
        "load_parameters_path ('{}') and load_full_state_path ('{}') are both set; set one "
        "(parameters only, or the full training state)",
        c.load_parameters_path, c.load_full_state_path);
  }
  // Rank 0 alone looks at the run directory: every rank resumes from the step it names, or
  // none does (a rank seeing another directory must not start fresh beside the others).
  int64_t latest = -1;
  if (c.enable_checkpointing) {
    run_on_root(world, [&] {
      for (const std::string& name : remove_partial_checkpoints(run_dir)) {
        log::info("removed the partial checkpoint {} (a save that did not complete)", name);
      }
      latest = latest_checkpoint_step(run_dir).value_or(-1);
    });
    world.broadcast(std::span<int64_t>(&latest, 1), 0);
    // A resume is checked against rank 0's digest below; a fresh start writes the run directory
    // from every rank at its first save, so every rank must see rank 0's directory.
    if (latest < 0) check_run_directory_shared(run_dir, world);
  }
  StartingState s;
  run_on_every_rank(world, [&] {
    const auto open_full_state = [&](const fs::path& from_run, int64_t step) {
      OpenCheckpoint checkpoint = open_checkpoint(from_run, step);
      // The recorded model first: it names the field, where the tensors would name a shape.
      check_recorded_model(c, checkpoint.state.model, model, checkpoint_directory(from_run, step),
                           false);
      check_full_state(checkpoint.tensors, global_specs, model.weight_dtype);
      s.step = checkpoint.state.step;
      s.data_position = checkpoint.state.data_position;
      s.tensors = std::move(checkpoint.tensors);
      s.with_moments = true;
    };
    if (latest >= 0) {
      open_full_state(run_dir, latest);
      s.resumed = true;
      s.source =
          fmt::format("resuming from checkpoint {} (data position {})", s.step, s.data_position);
    } else if (!c.load_full_state_path.empty()) {
      const auto [from_run, step] =
          locate_checkpoint("load_full_state_path", c.load_full_state_path);
      open_full_state(from_run, step);
      s.source =
          fmt::format("starting from the full state of {} (step {}, data position {})",
                      checkpoint_directory(from_run, step).string(), s.step, s.data_position);
    } else if (!c.load_parameters_path.empty()) {
      const fs::path dir = without_trailing_separator(c.load_parameters_path);
      if (!fs::is_directory(dir)) {
        fail(
            "load_parameters_path = '{}' is not a directory: give a Hugging Face directory "
            "(config.json + safetensors) or a checkpoint directory <run>/checkpoints/<step>",
            c.load_parameters_path);
      }
      std::error_code ec;
      if (fs::exists(fs::symlink_status(dir / "state.json", ec))) {  // a maxctx checkpoint
        check_recorded_model(c, model::read_recorded_model(dir), model, dir, true);
      }
      s.tensors.emplace(io::open_tensor_index(dir), dir.string());
      model::check_weight_tensors(*s.tensors, global_specs);
      s.source = fmt::format("starting from the parameters of {} ({}; fresh optimizer, step 0)",
                             dir.string(),
                             hf_config_json(c).empty() ? "model from the config's keys"
                                                       : "model from its config.json");
    } else {
      // Nothing to read: each rank generates its own shard's values (model::init_weight_range),
      // the same bits as initialising the whole model and cutting the shard out of it.
      s.source = fmt::format("starting from initialised weights (init_weights_seed {})",
                             c.init_weights_seed);
    }
  });
  // Every rank must start from what rank 0 starts from: a rank whose copy of the run directory
  // or checkpoint differs (node-local disk, a lagging network filesystem) would train a diverging
  // replica beside the others. Rank 0's digest against each rank's own.
  const int64_t digest = starting_state_digest(s);
  int64_t root_digest = digest;
  world.broadcast(std::span<int64_t>(&root_digest, 1), 0);
  agree_on_errors(
      world,
      digest == root_digest
          ? std::string()
          : fmt::format("the starting state this rank read ({}) differs from rank 0's: the run "
                        "directory '{}' and the checkpoints must be on storage every rank sees "
                        "alike",
                        s.source, run_dir.string()));
  return s;
}

}  // namespace maxctx::train

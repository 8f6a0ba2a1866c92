// `maxctx check-logits <config> load_parameters_path=<dir> golden_logits_path=<file.jsonl>
//  [max_kl_div=...] [atol=...] [rtol=...]`: MaxText's forward_pass_logit_checker.
//
// Builds the model from load_parameters_path (a Hugging Face directory: its config.json gives the
// model; without config.json, a maxctx checkpoint directory read as the model it records, or
// with the config's model keys when it records none;
// either in one file or many, each rank reading only its own blocks),
// runs one forward per golden prompt on the mesh at hand and compares the logits (io/
// golden_logits.h: allclose with atol + rtol·|golden|, and max per-token KL(golden‖model)).
// Under context parallelism the prompt is sharded over `context` exactly as training does (dual
// chunk swap when context_parallel_load_balance), attention runs through the configured CP
// strategy, and the logits rows are all-gathered back into prompt order. A prompt whose length
// does not split (S % 2·cp, or S % cp without balancing) is padded at the end with segment-0
// tokens, which no real token attends to, and their rows are dropped. `tensor` splits the
// weights as in training; `data` and `fsdp` replicas each run the same forward (weights whole).
// Every rank reaches the same verdict; failure is one error line and a non-zero exit.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <memory>

#include "cli/common.h"
#include "cli/hardware.h"
#include "maxctx/core/check.h"
#include "maxctx/core/log.h"
#include "maxctx/io/golden_logits.h"
#include "maxctx/kernels/host_transfer.h"
#include "maxctx/model/activations.h"
#include "maxctx/model/hf_import.h"
#include "maxctx/model/llama.h"
#include "maxctx/model/model_record.h"
#include "maxctx/parallel/load_balance.h"
#include "maxctx/parallel/parallelize.h"

namespace maxctx::cli {
namespace {

namespace fs = std::filesystem;

constexpr const char* kUsage =
    "usage: maxctx check-logits <config.yml> load_parameters_path=<dir> "
    "golden_logits_path=<golden.jsonl>\n"
    "                           [max_kl_div=1e-4] [atol=0.1] [rtol=0.1] [mesh keys ...]\n\n"
    "MaxText's forward_pass_logit_checker. <dir> is a Hugging Face checkpoint (config.json +\n"
    "safetensors, one file or several with model.safetensors.index.json), or a maxctx checkpoint\n"
    "directory (sharded, saved on any mesh; the model it records, or the config's keys for an\n"
    "older one that records none). The golden file\n"
    "is JSONL: {\"prompt\", \"tokens\", \"logits\" [seq][vocab]} per line; or top-k goldens,\n"
    "\"top_k_ids\" and \"top_k_logits\" [rows][k] (highest first) for the rows \"top_k_rows\"\n"
    "(absent: every row), with or without \"logits\". A top-k row passes when the golden ids'\n"
    "logits are within atol + rtol*|golden| and no other id exceeds the k-th golden logit by\n"
    "more than that (ties within tolerance may swap; no KL: the rest of the vocabulary is\n"
    "unknown).\n"
    "Runs one forward per prompt on the mesh (context, tensor, expert, data, fsdp axes; e.g.\n"
    "`mpirun -np 4 maxctx check-logits ... ici_context_parallelism=4`) and prints the max\n"
    "|model - golden| and the max per-token KL(golden||model). Fails (exit 1) when any logit has\n"
    "|model - golden| > atol + rtol*|golden| (numpy.allclose) or when the max KL > max_kl_div.\n"
    "With dtype or weight_dtype bfloat16 and no max_kl_div given, max_kl_div is 0.015 (MaxText's\n"
    "bf16 bound).\n"
    "Prompts whose length does not split over context are padded with ignored tokens.\n";

constexpr double kBf16MaxKl = 0.015;

struct ModelOnMesh {
  model::LlamaConfig config;
  std::vector<model::WeightSpec> specs;  // this tensor rank's blocks and expert rank's experts
  Tensor params;                         // in weight_dtype
  model::LlamaWeights weights;
  parallel::TrainingParallelPlans plans;  // the training forward's, without parameter sharding
};

void load_model(const Config& c, const Mesh& mesh, const parallel::ParallelDims& dims,
                const kernels::Kernels& kernels, ModelOnMesh& m) {
  const fs::path dir(c.load_parameters_path);
  if (c.load_parameters_path.empty() || !fs::is_directory(dir)) {
    fail("check-logits needs load_parameters_path=<directory with config.json + safetensors>{}",
         c.load_parameters_path.empty() ? "" : fmt::format(" (got '{}')", c.load_parameters_path));
  }
  const bool hf = fs::exists(dir / "config.json");
  // A maxctx checkpoint: the model it records (model keys given must agree), else the config's.
  m.config =
      hf ? model::llama_config_from_hf(dir / "config.json") : model::checkpoint_model(c, dir);
  model::apply_precision(c, m.config);
  m.specs = model::llama_weight_specs(m.config, static_cast<int>(dims.tensor), dims.tensor_rank,
                                      static_cast<int>(dims.expert),
                                      static_cast<int>(mesh.coord(Axis::kExpert)));
  m.params = kernels.empty({model::total_numel(m.specs)}, m.config.weight_dtype);
  model::load_hf_weights(kernels, m.specs, m.params.view(), dir);
  m.weights = model::bind_weights(m.specs, m.params.view());
  m.plans = parallel::parallelize_training(c, mesh, dims, kernels);
  log::info(
      "check-logits: model from {} ({}): vocab {}, emb {}, layers {}, heads {}/{} kv, head_dim "
      "{}, mlp {}; dtype {}, weight_dtype {}",
      dir.string(), hf ? "config.json" : "the checkpoint's record or the config's model keys",
      m.config.vocab_size, m.config.emb_dim, m.config.num_layers, m.config.num_query_heads,
      m.config.num_kv_heads, m.config.head_dim, m.config.mlp_dim, c.dtype, c.weight_dtype);
}

// The model's logits for one prompt, (S, V) in prompt order, on every rank.
std::vector<float> forward_logits(const Config& c, const Mesh& mesh, ModelOnMesh& m,
                                  const io::GoldenPrompt& g, int64_t& padded_len) {
  const Communicator& context = mesh.axis(Axis::kContext);
  const int64_t cp = context.size();
  const bool balance = c.context_parallel_load_balance;
  const int64_t S = g.seq();
  const int64_t multiple = cp == 1 ? 1 : (balance ? 2 * cp : cp);
  padded_len = (S + multiple - 1) / multiple * multiple;
  // Padding: token 0, segment 0 (the real tokens are segment 1), positions running on.
  std::vector<int32_t> tokens(padded_len, 0), positions(padded_len), segments(padded_len, 0);
  for (int64_t i = 0; i < padded_len; ++i) positions[i] = static_cast<int32_t>(i);
  std::copy(g.tokens.begin(), g.tokens.end(), tokens.begin());
  std::fill(segments.begin(), segments.begin() + S, 1);

  MAXCTX_CHECK_EQ(int64_t{context.rank()}, mesh.coord(Axis::kContext),
                  "context communicator ranks follow the mesh coordinate");
  const int64_t local = context_shard_len(padded_len, cp);
  const std::vector<int64_t> mine =
      context_shard_indices(padded_len, cp, mesh.coord(Axis::kContext), balance);
  std::vector<int32_t> local_tokens(local), local_positions(local), local_segments(local);
  for (int64_t i = 0; i < local; ++i) {
    local_tokens[i] = tokens[mine[i]];
    local_positions[i] = positions[mine[i]];
    local_segments[i] = segments[mine[i]];
  }
  const kernels::Kernels& k = *m.plans.model.kernels;
  // The kernels read the ids in the backend's memory; the context plans exchange the host's.
  const kernels::DeviceIndices device_tokens(k, local_tokens);
  const kernels::DeviceIndices device_positions(k, local_positions);
  const kernels::DeviceIndices device_segments(k, local_segments);
  model::TokenBatch batch{
      1,      local, device_tokens.data(), nullptr, device_positions.data(), device_segments.data(),
      nullptr};
  batch.host_positions = local_positions.data();
  batch.host_segment_ids = local_segments.data();
  model::LlamaActivations acts =
      model::allocate_activations(k, m.config, 1, local, m.plans.model.tensor_size);
  model::llama_forward(m.config, m.weights, batch, m.plans.model, acts);

  const int64_t V = m.config.vocab_size;
  const std::vector<float> local_logits =
      kernels::download_floats(k, acts.logits.view().elements(0, local * V));
  std::vector<float> gathered(padded_len * V);  // rank-major: rank r's rows, in its local order
  context.all_gather<float>(local_logits, gathered);
  std::vector<float> logits(S * V);
  for (int64_t r = 0; r < cp; ++r) {
    const std::vector<int64_t> rows = context_shard_indices(padded_len, cp, r, balance);
    for (int64_t j = 0; j < local; ++j) {
      if (rows[j] >= S) continue;  // padding
      const float* src = gathered.data() + (r * local + j) * V;
      std::copy(src, src + V, logits.data() + rows[j] * V);
    }
  }
  return logits;
}

}  // namespace

int run_check_logits(const Args& args) {
  if (!args.empty() && (args[0] == "--help" || args[0] == "-h")) {
    if (log::rank() == 0) std::fputs(kUsage, stdout);
    return 0;
  }
  Config c = load_command_config(args, "check-logits");
  log::info("{}", format_config(c));
  // bf16 logits sit about 1e-2 in KL from fp32 ones (transformers' bf16 is 1.7e-2 from its own
  // fp32): a bf16 run not given max_kl_div is held to MaxText's bf16 bound (its conversion
  // checks pass --max_kl_div=0.015), not the fp32 default, and says so.
  const bool kl_given = std::find(c.explicit_keys.begin(), c.explicit_keys.end(), "max_kl_div") !=
                        c.explicit_keys.end();
  if ((c.dtype == "bfloat16" || c.weight_dtype == "bfloat16") && !kl_given &&
      c.max_kl_div == Config().max_kl_div) {
    c.max_kl_div = kBf16MaxKl;
    log::info(
        "check-logits: bfloat16, so max_kl_div = {} (MaxText's bf16 bound; pass max_kl_div= "
        "to choose another)",
        kBf16MaxKl);
  }
  if (c.golden_logits_path.empty()) {
    fail("check-logits needs golden_logits_path=<golden.jsonl> (MaxText's format)");
  }
  if (!(c.max_kl_div >= 0.0) || !(c.atol >= 0.0) || !(c.rtol >= 0.0)) {
    fail("max_kl_div, atol and rtol must be >= 0 (got {}, {}, {})", c.max_kl_div, c.atol, c.rtol);
  }
  const Mesh mesh = mesh_for(c);
  const parallel::ParallelDims dims = parallel::ParallelDims::training(mesh);
  ModelOnMesh m;
  load_model(c, mesh, dims, kernels_for(c), m);
  const std::vector<io::GoldenPrompt> golden = io::read_golden_logits(c.golden_logits_path);
  log::info(
      "check-logits: {} prompts from {}; mesh context {} ({}, load balance {}), tensor {}, "
      "expert {}",
      golden.size(), c.golden_logits_path, mesh.axis_size(Axis::kContext),
      c.context_parallel_strategy, c.context_parallel_load_balance ? "on" : "off",
      mesh.axis_size(Axis::kTensor), mesh.axis_size(Axis::kExpert));

  io::LogitComparison total;
  io::TopKComparison top_k;
  size_t kl_prompt = 0, worst_prompt = 0;
  for (size_t p = 0; p < golden.size(); ++p) {
    const io::GoldenPrompt& g = golden[p];
    if (!g.logits.empty() && g.vocab != m.config.vocab_size) {
      fail("{}: prompt {} has logits over {} tokens; the model's vocabulary is {}",
           c.golden_logits_path, p, g.vocab, m.config.vocab_size);
    }
    for (const int32_t t : g.tokens) {
      if (t >= m.config.vocab_size) {
        fail("{}: prompt {} holds token {}, outside the vocabulary of {}", c.golden_logits_path, p,
             t, m.config.vocab_size);
      }
    }
    for (const int32_t id : g.top_k_ids) {
      if (id >= m.config.vocab_size) {
        fail("{}: prompt {} has top-k id {}, outside the vocabulary of {}", c.golden_logits_path, p,
             id, m.config.vocab_size);
      }
    }
    int64_t padded = 0;
    const std::vector<float> logits = forward_logits(c, mesh, m, g, padded);
    if (g.top_k > 0) {
      const io::TopKComparison k =
          io::compare_top_k(g, logits, m.config.vocab_size, c.atol, c.rtol);
      log::info(
          "prompt {}: top-{} goldens of {} rows: max |model - golden| = {:.3e}, {} rows with "
          "other top ids or logits outside atol + rtol*|golden|",
          p, g.top_k, k.rows, k.max_abs_diff, k.num_failed);
      top_k.rows += k.rows;
      top_k.max_abs_diff = std::max(top_k.max_abs_diff, k.max_abs_diff);
      if (k.num_failed > 0 && top_k.num_failed == 0) {
        top_k.first_failure = fmt::format("prompt {} {}", p, k.first_failure);
      }
      top_k.num_failed += k.num_failed;
    }
    if (g.logits.empty()) continue;  // top-k goldens only
    const io::LogitComparison r =
        io::compare_logits(g.logits, logits, g.seq(), g.vocab, c.atol, c.rtol);
    log::info(
        "prompt {}: {} tokens{}: max |model - golden| = {:.3e}, max KL(golden||model) = {:.3e} "
        "(token {}), {} of {} logits outside atol + rtol*|golden|",
        p, g.seq(),
        padded == g.seq()
            ? std::string()
            : fmt::format(" (padded to {} for context {})", padded, mesh.axis_size(Axis::kContext)),
        r.max_abs_diff, r.max_kl, r.max_kl_token, r.num_outside, r.logits);
    total.tokens += r.tokens;
    total.logits += r.logits;
    total.max_abs_diff = std::max(total.max_abs_diff, r.max_abs_diff);
    if (r.max_kl > total.max_kl || p == 0) {
      total.max_kl = r.max_kl;
      total.max_kl_token = r.max_kl_token;
      kl_prompt = p;
    }
    if (r.num_outside > 0 && total.num_outside == 0) {
      total.worst_token = r.worst_token;
      total.worst_vocab = r.worst_vocab;
      total.worst_model = r.worst_model;
      total.worst_golden = r.worst_golden;
      worst_prompt = p;
    }
    total.num_outside += r.num_outside;
  }
  log::info("Max absolute difference: {:.6e} (atol {} + rtol {} * |golden|)", total.max_abs_diff,
            c.atol, c.rtol);
  log::info("Max KL divergence for a single token: {:.6e} (max_kl_div {})", total.max_kl,
            c.max_kl_div);
  if (top_k.rows > 0) {
    log::info("Top-k rows: {}, max |model - golden| over their ids {:.6e}", top_k.rows,
              top_k.max_abs_diff);
  }

  std::vector<std::string> failures;
  if (total.num_outside > 0) {
    failures.push_back(fmt::format(
        "{} of {} logits outside |model - golden| <= atol {} + rtol {} * |golden| (first prompt "
        "with any: {}, e.g. token {} id {}: model {} vs golden {})",
        total.num_outside, total.logits, c.atol, c.rtol, worst_prompt, total.worst_token,
        total.worst_vocab, total.worst_model, total.worst_golden));
  }
  if (top_k.num_failed > 0) {
    failures.push_back(
        fmt::format("{} of {} top-k rows differ beyond atol {} + rtol {} * |golden| (first: {})",
                    top_k.num_failed, top_k.rows, c.atol, c.rtol, top_k.first_failure));
  }
  if (!(total.max_kl <= c.max_kl_div)) {
    failures.push_back(
        fmt::format("max KL(golden||model) {:.3e} > max_kl_div {} (prompt {} token {})",
                    total.max_kl, c.max_kl_div, kl_prompt, total.max_kl_token));
  }
  if (!failures.empty()) fail("check-logits failed: {}", fmt::join(failures, "; "));
  log::info("check-logits: PASS ({} prompts, {} tokens{})", golden.size(), total.tokens,
            top_k.rows > 0 ? fmt::format(", {} top-k rows", top_k.rows) : std::string());
  return 0;
}

}  // namespace maxctx::cli

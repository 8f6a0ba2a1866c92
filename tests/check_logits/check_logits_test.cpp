// `maxctx check-logits` in-process on 1, 2 and 4 ranks: the Hugging Face import of the torch
// fixture (tests/fixtures/tiny_llama) gives the torch logits with max KL < 1e-6 and every logit
// within 1e-5 on one rank and with context = 2 and 4 (all_gather and ring, balanced or not, the
// 10- and 12-token prompts padded where they do not split), also with tensor parallelism and
// data replicas; the Mixtral fixture (tests/fixtures/tiny_mixtral) likewise with context and
// with expert; the same fixture saved by transformers in two files with
// model.safetensors.index.json (tests/fixtures/tiny_llama_two_files) loads the same weights bit
// for bit and passes the same check on every mesh; and copies of the golden file with perturbed
// logits fail, each on the bound it breaks.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "maxctx/core/check.h"
#include "maxctx/io/golden_logits.h"
#include "maxctx/mesh/communicator.h"
#include "maxctx/model/hf_import.h"
#include "maxctx/model/weights.h"

namespace maxctx::cli {
using Args = std::vector<std::string>;
int run_check_logits(const Args& args);  // src/cli/check_logits.cpp
}  // namespace maxctx::cli

namespace maxctx {
namespace {

namespace fs = std::filesystem;

const std::string kFixture = std::string(MAXCTX_TEST_FIXTURES) + "/tiny_llama";
const std::string kGolden = kFixture + "/golden_logits.jsonl";

int world_size() { return Communicator::world().size(); }

int check(const std::string& golden, std::vector<std::string> extra) {
  cli::Args args = {std::string(MAXCTX_SOURCE_DIR) + "/configs/base.yml",
                    "load_parameters_path=" + kFixture, "golden_logits_path=" + golden};
  args.insert(args.end(), extra.begin(), extra.end());
  return cli::run_check_logits(args);
}

// The tight bounds of the fixture check: fp32 logits against float64 torch rounded to fp32.
const std::vector<std::string> kTight = {"max_kl_div=1e-6", "atol=1e-5", "rtol=0"};

std::vector<std::string> with(std::vector<std::string> base, std::vector<std::string> more) {
  base.insert(base.end(), more.begin(), more.end());
  return base;
}

TEST(CheckLogits, TorchFixtureOnEveryContextSize) {
  const std::string cp = "ici_context_parallelism=" + std::to_string(world_size());
  EXPECT_EQ(check(kGolden, with(kTight, {cp})), 0);
  if (world_size() == 1) return;
  EXPECT_EQ(check(kGolden, with(kTight, {cp, "context_parallel_strategy=ring"})), 0);
  EXPECT_EQ(check(kGolden, with(kTight, {cp, "context_parallel_load_balance=false"})), 0);
}

// A Hugging Face checkpoint in two files with an index (transformers' save_pretrained with a
// max_shard_size, tools/reference/transformers_checks.py) loads the very weights of the single
// file, and its logits pass the tight check on 1, 2 and 4 ranks: context over every rank, and on
// 2 and 4 ranks tensor = 2 (each rank reading only its heads' rows from both files).
TEST(CheckLogits, TwoFileCheckpointLoadsAsTheSingleFile) {
  const std::string two_files = std::string(MAXCTX_TEST_FIXTURES) + "/tiny_llama_two_files";
  const model::LlamaConfig config = model::llama_config_from_hf(fs::path(kFixture) / "config.json");
  const std::vector<model::WeightSpec> specs = model::llama_weight_specs(config);
  std::vector<float> one(model::total_numel(specs)), two(one.size(), -1.0f);
  model::load_hf_weights(specs, one.data(), kFixture);
  model::load_hf_weights(specs, two.data(), two_files);
  EXPECT_EQ(std::memcmp(one.data(), two.data(), one.size() * sizeof(float)), 0);

  auto check_two_files = [&](std::vector<std::string> mesh) {
    cli::Args args = {std::string(MAXCTX_SOURCE_DIR) + "/configs/base.yml",
                      "load_parameters_path=" + two_files, "golden_logits_path=" + kGolden};
    args.insert(args.end(), mesh.begin(), mesh.end());
    args.insert(args.end(), kTight.begin(), kTight.end());
    return cli::run_check_logits(args);
  };
  EXPECT_EQ(check_two_files({"ici_context_parallelism=" + std::to_string(world_size())}), 0);
  if (world_size() == 1) return;
  EXPECT_EQ(check_two_files({"ici_tensor_parallelism=2",
                             "ici_context_parallelism=" + std::to_string(world_size() / 2)}),
            0);
}

// The Mixtral fixture (tiny_mixtral: 4 experts, 2 per token) through the Hugging Face
// MixtralConfig import, both dispatch paths, with context and with tensor parallelism.
TEST(CheckLogits, MixtralFixtureOnEveryContextSize) {
  const std::string fixture = std::string(MAXCTX_TEST_FIXTURES) + "/tiny_mixtral";
  const std::string cp = "ici_context_parallelism=" + std::to_string(world_size());
  for (const char* sparse : {"sparse_matmul=true", "sparse_matmul=false"}) {
    cli::Args args = {std::string(MAXCTX_SOURCE_DIR) + "/configs/base.yml",
                      "load_parameters_path=" + fixture,
                      "golden_logits_path=" + fixture + "/golden_logits.jsonl", cp, sparse};
    args.insert(args.end(), kTight.begin(), kTight.end());
    EXPECT_EQ(cli::run_check_logits(args), 0) << sparse;
    if (world_size() == 1) continue;
    // The experts' hidden units split over tensor.
    args[3] = "ici_tensor_parallelism=2";
    args.push_back("ici_context_parallelism=" + std::to_string(world_size() / 2));
    EXPECT_EQ(cli::run_check_logits(args), 0) << sparse << " tensor 2";
  }
}

// The Mixtral fixture with its experts split over the expert axis (every expert rank holds the
// one prompt; its rows travel to their experts' ranks and back): expert = ranks, and on 4 ranks
// expert = 2 with context = 2; both dispatch paths, KL <= 1e-6 (kTight).
TEST(CheckLogits, MixtralFixtureOverTheExpertAxis) {
  if (world_size() == 1) GTEST_SKIP() << "needs 2 or 4 ranks";
  const std::string fixture = std::string(MAXCTX_TEST_FIXTURES) + "/tiny_mixtral";
  std::vector<std::vector<std::string>> meshes = {
      {"ici_expert_parallelism=" + std::to_string(world_size())}};
  if (world_size() == 4) {
    meshes.push_back({"ici_expert_parallelism=2", "ici_context_parallelism=2"});
  }
  for (const std::vector<std::string>& mesh : meshes) {
    for (const char* sparse : {"sparse_matmul=true", "sparse_matmul=false"}) {
      cli::Args args = {std::string(MAXCTX_SOURCE_DIR) + "/configs/base.yml",
                        "load_parameters_path=" + fixture,
                        "golden_logits_path=" + fixture + "/golden_logits.jsonl", sparse};
      args.insert(args.end(), mesh.begin(), mesh.end());
      args.insert(args.end(), kTight.begin(), kTight.end());
      EXPECT_EQ(cli::run_check_logits(args), 0) << sparse << " " << mesh[0];
    }
  }
}

TEST(CheckLogits, TensorParallelAndDataReplicas) {
  if (world_size() == 1) GTEST_SKIP() << "needs 2 or 4 ranks";
  EXPECT_EQ(
      check(kGolden, with(kTight, {"ici_tensor_parallelism=2",
                                   "ici_context_parallelism=" + std::to_string(world_size() / 2)})),
      0);
  EXPECT_EQ(
      check(kGolden, with(kTight, {"ici_data_parallelism=2", "ici_fsdp_parallelism=1",
                                   "ici_context_parallelism=" + std::to_string(world_size() / 2)})),
      0);
}

// Rank 0 writes a perturbed copy where every rank can read it.
std::string perturbed_copy(const std::string& name, void (*perturb)(io::GoldenPrompt&)) {
  const fs::path dir = fs::path(MAXCTX_BINARY_DIR) / "tests" / "check_logits" /
                       ("perturbed_np" + std::to_string(world_size()));
  const fs::path path = dir / name;
  if (Communicator::world().rank() == 0) {
    fs::create_directories(dir);
    std::vector<io::GoldenPrompt> golden = io::read_golden_logits(kGolden);
    perturb(golden[1]);
    io::write_golden_logits(path, golden);
  }
  Communicator::world().barrier();
  return path.string();
}

std::string error_of(const std::string& golden, std::vector<std::string> extra) {
  try {
    check(golden, extra);
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(CheckLogits, PerturbedLogitsFail) {
  const std::string cp = "ici_context_parallelism=" + std::to_string(world_size());
  // One logit off by 1e-3: outside atol = 1e-5, while the KL stays far below 1.
  const std::string one_logit = perturbed_copy(
      "one_logit.jsonl", [](io::GoldenPrompt& g) { g.logits[7 * g.vocab + 11] += 1e-3f; });
  const std::string e1 = error_of(one_logit, {cp, "max_kl_div=1", "atol=1e-5", "rtol=0"});
  EXPECT_NE(e1.find("1 of 2112 logits outside |model - golden| <= atol 1e-05 + rtol 0"),
            std::string::npos)
      << e1;
  EXPECT_NE(e1.find("token 7 id 11"), std::string::npos) << e1;
  EXPECT_EQ(e1.find("max_kl_div"), std::string::npos) << e1;
  // The same copy passes once the tolerance admits the change.
  EXPECT_EQ(check(one_logit, {cp, "max_kl_div=1e-6", "atol=2e-3", "rtol=0"}), 0);

  // Token 3's distribution moved (half the vocabulary up by 2): fails the KL bound alone.
  const std::string shifted = perturbed_copy("shifted_row.jsonl", [](io::GoldenPrompt& g) {
    for (int64_t v = 0; v < g.vocab / 2; ++v) g.logits[3 * g.vocab + v] += 2.0f;
  });
  const std::string e2 = error_of(shifted, {cp, "max_kl_div=1e-6", "atol=10", "rtol=0"});
  EXPECT_NE(e2.find("max_kl_div 1e-06 (prompt 1 token 3)"), std::string::npos) << e2;
  EXPECT_EQ(e2.find("outside"), std::string::npos) << e2;
}

TEST(CheckLogits, UserErrors) {
  EXPECT_NE(error_of("", {}).find("needs golden_logits_path"), std::string::npos);
  const std::string wrong_vocab = perturbed_copy("wrong_vocab.jsonl", [](io::GoldenPrompt& g) {
    g.vocab = 48;
    g.logits.resize(g.seq() * 48);
  });
  EXPECT_NE(error_of(wrong_vocab, {}).find("logits over 48 tokens; the model's vocabulary is 96"),
            std::string::npos);
}

}  // namespace
}  // namespace maxctx

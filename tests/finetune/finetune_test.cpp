// Fine-tuning (issue #18 parts 1-4): starting from weights, text data packed under context
// parallelism, evaluation, gradient accumulation. ctest runs this binary on 1, 2 and 3 ranks;
// each case runs where the world size suits it and compares against a single-device run that
// every rank also runs on a one-rank mesh of its own (Communicator::self()).
//  - A Hugging Face directory loaded into training gives the first-step loss the golden logits
//    (PyTorch's, tests/fixtures/tiny_llama) imply, on 1 rank and under context=2 / fsdp=2
//    (1e-5 relative): the loaded weights, config.json's model and the packed rows are right.
//  - load_full_state_path continues a run bit for bit; load_parameters_path starts at step 0
//    from the same parameters; the run's own checkpoints take precedence; a mismatched model is
//    an error naming the tensor; setting both keys is an error.
//  - gradient_accumulation_steps = 2 gives the losses and parameters of the batch twice as large
//    (1e-5 relative, norm-relative for the parameters), on 1 rank, data=2, fsdp=2, context=2.
//  - hf text data (JSON Lines, two files by glob) packed into rows: context = 2, 3 give the
//    single-device losses, parameters and eval losses (1e-5), and so do data = 2 and fsdp = 2
//    (each rank evaluating its block of the eval rows); a run stopped and resumed from its
//    checkpoint is bit-identical to the uninterrupted one.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <fstream>

#include "../train_loop/train_support.h"
#include "maxctx/io/golden_logits.h"
#include "maxctx/mesh/mesh.h"
#include "maxctx/train/initial_state.h"
#include "maxctx/train/metrics.h"
#include "maxctx/train/token_file.h"
#include "maxctx/train/trainer.h"

namespace maxctx::train {
namespace {

using testing::norm_relative_error;
using testing::with_overrides;

const std::string kFixtures = MAXCTX_TEST_FIXTURES;
const auto& cpu() { return maxctx::kernels::backend(maxctx::Device::kCpu); }

struct TrainerRun {
  std::unique_ptr<Mesh> mesh;
  std::unique_ptr<Trainer> trainer;
};

// A trainer on the world's mesh (as the overrides lay it out), or on this rank alone.
TrainerRun make_run(const std::vector<std::string>& overrides, bool single_device = false) {
  const int world = single_device ? 1 : Communicator::world().size();
  const Config config = load_config(testing::kBaseConfig, overrides, world);
  TrainerRun run;
  if (single_device) {
    run.mesh = std::make_unique<Mesh>(MeshSpec{}, Communicator::self());
  } else {
    MeshSpec spec;
    spec.ici = config.derived.ici_parallelism;
    spec.dcn = config.derived.dcn_parallelism;
    run.mesh = std::make_unique<Mesh>(spec);
  }
  run.trainer = std::make_unique<Trainer>(config, *run.mesh, cpu());
  return run;
}

std::string error_of(const std::vector<std::string>& overrides) {
  try {
    make_run(overrides);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

void expect_losses_near(const Trainer& run, const Trainer& reference, double tolerance) {
  ASSERT_EQ(run.history().size(), reference.history().size());
  for (size_t i = 0; i < run.history().size(); ++i) {
    const double expected = reference.history()[i].loss;
    EXPECT_LT(std::fabs(run.history()[i].loss - expected) / expected, tolerance)
        << "step " << i << ": " << run.history()[i].loss << " vs " << expected;
    EXPECT_EQ(run.history()[i].total_weights, reference.history()[i].total_weights) << i;
  }
}

// ---- 1. Starting from weights ----

// Σ xent of the golden logits' rows against the next token of each prompt (EOS after the last),
// and the number of targets: the loss a training step on these documents must report.
std::pair<double, int64_t> golden_loss_sum(const std::vector<io::GoldenPrompt>& prompts,
                                           int32_t eos) {
  double sum = 0.0;
  int64_t count = 0;
  for (const io::GoldenPrompt& g : prompts) {
    for (int64_t i = 0; i < g.seq(); ++i) {
      const float* row = g.logits.data() + i * g.vocab;
      double max = row[0];
      for (int64_t v = 1; v < g.vocab; ++v) max = std::max(max, double(row[v]));
      double z = 0.0;
      for (int64_t v = 0; v < g.vocab; ++v) z += std::exp(row[v] - max);
      const int32_t target = i + 1 < g.seq() ? g.tokens[i + 1] : eos;
      sum += max + std::log(z) - row[target];
      ++count;
    }
  }
  return {sum, count};
}

// A Mixtral directory loaded under the dense base config: the config the run reports (its FLOP
// count) describes the experts it loaded.
TEST(StartFromWeights, MixtralDirectoryKeepsItsExpertsInTheConfig) {
  const Config config =
      load_config(testing::kBaseConfig, {"load_parameters_path=" + kFixtures + "/tiny_mixtral"}, 1);
  const model::LlamaConfig loaded = training_model_config(config);
  ASSERT_TRUE(loaded.moe);
  const Config described = with_model_dimensions(config, loaded);
  const FlopsModel flops = flops_model(described);
  EXPECT_EQ(flops.num_experts, loaded.num_experts);
  EXPECT_EQ(flops.num_experts_per_tok, loaded.num_experts_per_tok);
  EXPECT_EQ(described.decoder_block, "mixtral");
}

TEST(StartFromWeights, HuggingFaceDirectoryGivesTheGoldenFirstStepLoss) {
  const int world = Communicator::world().size();
  if (world > 2) GTEST_SKIP() << "1 or 2 ranks";
  testing::SharedTempDir dir;
  const std::string model_dir = kFixtures + "/tiny_llama";
  const auto golden = io::read_golden_logits(model_dir + "/golden_logits.jsonl");
  // The golden prompts as two documents of one packed row (EOS 2 after each): the second
  // document's positions restart at 0, as its golden logits were computed.
  const std::string tokens = (dir.path() / "golden.bin").string();
  if (Communicator::world().rank() == 0) {
    std::vector<int32_t> ids;
    for (const auto& g : golden) {
      ids.insert(ids.end(), g.tokens.begin(), g.tokens.end());
      ids.push_back(2);
    }
    write_token_file(tokens, ids, 2, TokenWidth::kUInt16);
  }
  Communicator::world().barrier();
  const auto [sum, count] = golden_loss_sum(golden, 2);

  std::vector<std::vector<std::string>> meshes = {{"ici_fsdp_parallelism=1"}};
  if (world == 2) {
    meshes = {{"ici_fsdp_parallelism=1", "ici_context_parallelism=2", "per_device_batch_size=0.5"},
              {"ici_fsdp_parallelism=2", "per_device_batch_size=1"}};
  }
  for (const auto& mesh : meshes) {
    const auto overrides = with_overrides(
        testing::tiny_training_overrides(dir.path(), "hf"),
        {"model_name=default", "load_parameters_path=" + model_dir, "dataset_type=tokens",
         "dataset_path=" + tokens, "max_target_length=24", "per_device_batch_size=1", "steps=1"});
    TrainerRun run = make_run(with_overrides(overrides, mesh));
    run.trainer->run();
    ASSERT_EQ(run.trainer->history().size(), 1u);
    const StepRecord& first = run.trainer->history()[0];
    // fsdp=2 reads the one-row epoch twice (two rows, same documents): the mean is the same.
    EXPECT_EQ(first.total_weights % count, 0);
    EXPECT_NEAR(first.loss, sum / double(count), 1e-5 * sum / double(count)) << mesh.back();
  }
}

// A 4-step run with checkpoints at 2 and 4 on the world's mesh (fsdp over every rank).
std::vector<std::string> checkpointed_overrides(const testing::SharedTempDir& dir,
                                                const std::string& tokens,
                                                const std::string& run_name) {
  return with_overrides(
      testing::tiny_training_overrides(dir.path(), run_name),
      {"dataset_type=tokens", "dataset_path=" + tokens, "steps=4", "learning_rate_schedule_steps=4",
       "enable_checkpointing=true", "checkpoint_period=2", "per_device_batch_size=1"});
}

TEST(StartFromWeights, FullStateContinuesParametersStartFresh) {
  testing::SharedTempDir dir;
  const std::string tokens = testing::write_packed_token_file(dir.path());
  TrainerRun a = make_run(checkpointed_overrides(dir, tokens, "a"));
  a.trainer->run();
  const std::vector<float> a_final = a.trainer->gather_parameters();
  const std::string step2 = (dir.path() / "a" / "checkpoints" / "2").string();

  // Full state: step 2, the data position and the moments; the rest of the run is A's, bit for
  // bit (same mesh, same data rows, same optimizer state).
  auto full =
      with_overrides(checkpointed_overrides(dir, tokens, "b"), {"load_full_state_path=" + step2});
  std::vector<float> b_start;
  {
    TrainerRun b = make_run(full);
    EXPECT_EQ(b.trainer->step(), 2);
    b_start = b.trainer->gather_parameters();
    b.trainer->run();
    EXPECT_EQ(b.trainer->gather_parameters(), a_final);
    ASSERT_EQ(b.trainer->history().size(), 2u);
    EXPECT_EQ(b.trainer->history()[1].loss, a.trainer->history()[3].loss);
  }
  // The run's own checkpoint (4, written by B) beats load_full_state_path.
  {
    TrainerRun again = make_run(full);
    EXPECT_EQ(again.trainer->step(), 4);
  }
  // A run directory names its latest checkpoint.
  {
    TrainerRun latest =
        make_run(with_overrides(checkpointed_overrides(dir, tokens, "c"),
                                {"load_full_state_path=" + (dir.path() / "a").string()}));
    EXPECT_EQ(latest.trainer->step(), 4);
    EXPECT_EQ(latest.trainer->gather_parameters(), a_final);
  }
  // Parameters only: step 0, the same weights, a fresh optimizer (its first update is not B's).
  {
    TrainerRun d = make_run(
        with_overrides(checkpointed_overrides(dir, tokens, "d"),
                       {"load_parameters_path=" + step2, "steps=1", "enable_checkpointing=false"}));
    EXPECT_EQ(d.trainer->step(), 0);
    EXPECT_EQ(d.trainer->gather_parameters(), b_start);
    d.trainer->run();
    EXPECT_EQ(d.trainer->step(), 1);
  }
}

TEST(StartFromWeights, MismatchAndConflictAreErrors) {
  testing::SharedTempDir dir;
  const std::string tokens = testing::write_packed_token_file(dir.path());
  {
    TrainerRun a = make_run(checkpointed_overrides(dir, tokens, "a"));
    a.trainer->run(2);
  }
  const std::string step2 = (dir.path() / "a" / "checkpoints" / "2").string();
  const auto base = checkpointed_overrides(dir, tokens, "x");
  const std::string mismatch = error_of(with_overrides(
      base, {"load_parameters_path=" + step2, "override_model_config=true", "base_mlp_dim=96"}));
  // The checkpoint records its model: the field is named before any tensor shape.
  EXPECT_NE(mismatch.find("the checkpoint's model has mlp_dim 192, this run's has 96"),
            std::string::npos)
      << mismatch;
  const std::string both = error_of(
      with_overrides(base, {"load_parameters_path=" + step2, "load_full_state_path=" + step2}));
  EXPECT_NE(both.find("both set"), std::string::npos) << both;
  const std::string missing =
      error_of(with_overrides(base, {"load_full_state_path=" + (dir.path() / "nope").string()}));
  EXPECT_NE(missing.find("not a directory"), std::string::npos) << missing;
}

// ---- 4. Gradient accumulation ----

// Two micro-batches equal the batch twice as large on every mesh; `model` selects the model
// (a mixture of experts adds MaxText's per-sequence load-balance loss, whose mean over the
// micro-batches equals the big batch's mean over its sequences).
void expect_accumulation_equals_big_batch(const std::vector<std::string>& model) {
  const int world = Communicator::world().size();
  if (world > 2) GTEST_SKIP() << "1 or 2 ranks";
  testing::SharedTempDir dir;
  const std::string tokens = testing::write_packed_token_file(dir.path());
  auto common = with_overrides(testing::tiny_training_overrides(dir.path(), "ga"),
                               {"dataset_type=tokens", "dataset_path=" + tokens});
  common = with_overrides(common, model);
  // The big batch on one device: 2 rows per micro-batch over the job, so 4 rows.
  const auto big = with_overrides(common, {"run_name=big", "ici_fsdp_parallelism=1",
                                           "per_device_batch_size=" + std::to_string(2 * world)});
  TrainerRun reference = make_run(big, /*single_device=*/true);
  reference.trainer->run();

  std::vector<std::vector<std::string>> meshes = {{"ici_fsdp_parallelism=1"}};
  if (world == 2) {
    meshes = {{"ici_fsdp_parallelism=1", "ici_data_parallelism=2"},
              {"ici_fsdp_parallelism=2"},
              {"ici_fsdp_parallelism=1", "ici_context_parallelism=2"}};
  }
  for (const auto& mesh : meshes) {
    auto overrides =
        with_overrides(common, {"gradient_accumulation_steps=2", "per_device_batch_size=1"});
    TrainerRun accumulated = make_run(with_overrides(overrides, mesh));
    accumulated.trainer->run();
    SCOPED_TRACE(mesh.back());
    expect_losses_near(*accumulated.trainer, *reference.trainer, 1e-5);
    EXPECT_LT(norm_relative_error(accumulated.trainer->gather_parameters(),
                                  reference.trainer->gather_parameters()),
              1e-5);
    for (size_t i = 0; i < reference.trainer->history().size(); ++i) {
      const double expected = reference.trainer->history()[i].moe_lb_loss;
      EXPECT_NEAR(accumulated.trainer->history()[i].moe_lb_loss, expected,
                  1e-5 * std::fabs(expected))
          << "step " << i;
    }
  }
}

TEST(GradientAccumulation, TwoMicroBatchesEqualTheBatchTwiceAsLarge) {
  expect_accumulation_equals_big_batch({});
}

TEST(GradientAccumulation, MixtureOfExpertsEqualsTheBatchTwiceAsLarge) {
  expect_accumulation_equals_big_batch(
      {"model_name=mixtral-tiny", "load_balance_loss_weight=0.01"});
}

// ---- 2 and 3. Text data packed under context parallelism; evaluation ----

std::vector<std::string> text_overrides(const testing::SharedTempDir& dir,
                                        const std::string& run_name) {
  const std::string corpus = kFixtures + "/text_corpus";
  return with_overrides(
      testing::tiny_training_overrides(dir.path(), run_name),
      {"override_model_config=true", "vocab_size=1000", "dataset_type=hf", "hf_path=json",
       "hf_train_files=" + corpus + "/train_*.jsonl", "hf_eval_files=" + corpus + "/eval.jsonl",
       "tokenizer_path=" + kFixtures + "/tokenizer/docs_spm.model", "eval_interval=2",
       "eval_steps=-1", "steps=4", "learning_rate_schedule_steps=4"});
}

// `common` on this rank alone with `rows` rows per step, run to the end.
TrainerRun single_device_run(const std::vector<std::string>& common, int rows) {
  TrainerRun reference =
      make_run(with_overrides(common, {"run_name=reference", "ici_fsdp_parallelism=1",
                                       "per_device_batch_size=" + std::to_string(rows)}),
               /*single_device=*/true);
  reference.trainer->run();
  return reference;
}

// The losses, eval numbers and final parameters of `reference` (1e-5, fp32). Collective.
void expect_text_run_near(Trainer& run, Trainer& reference) {
  expect_losses_near(run, reference, 1e-5);
  const auto& ref_history = reference.history();
  for (size_t i = 0; i < ref_history.size(); ++i) {
    const StepRecord& got = run.history()[i];
    ASSERT_EQ(got.evaluated, ref_history[i].evaluated);
    if (!got.evaluated) continue;
    EXPECT_EQ(got.eval_weights, ref_history[i].eval_weights);
    EXPECT_LT(std::fabs(got.eval_loss - ref_history[i].eval_loss) / ref_history[i].eval_loss, 1e-5);
  }
  EXPECT_LT(norm_relative_error(run.gather_parameters(), reference.gather_parameters()), 1e-5);
}

TEST(TextData, PackedRowsUnderContextEqualTheSingleDeviceRun) {
  const int world = Communicator::world().size();
  testing::SharedTempDir dir;
  // One row per device and step; the single device reads the same global batch.
  const auto common = text_overrides(dir, "text");
  TrainerRun reference = single_device_run(common, 1);
  const auto& ref_history = reference.trainer->history();
  ASSERT_EQ(ref_history.size(), 4u);
  EXPECT_TRUE(ref_history[1].evaluated && ref_history[3].evaluated && !ref_history[0].evaluated);
  EXPECT_GT(ref_history[1].eval_weights, 100);
  EXPECT_NEAR(ref_history[1].eval_perplexity, std::exp(ref_history[1].eval_loss), 1e-9);

  std::vector<std::vector<std::string>> meshes;
  if (world == 1) meshes = {{"ici_fsdp_parallelism=1", "per_device_batch_size=1"}};
  if (world == 2) {
    meshes = {{"ici_fsdp_parallelism=1", "ici_context_parallelism=2", "per_device_batch_size=0.5"},
              {"ici_fsdp_parallelism=1", "ici_context_parallelism=2", "per_device_batch_size=0.5",
               "context_parallel_strategy=ring"}};
  }
  if (world == 3) {
    meshes = {{"ici_fsdp_parallelism=1", "ici_context_parallelism=3",
               "per_device_batch_size=0.3333333333333333"}};
  }
  for (const auto& mesh : meshes) {
    SCOPED_TRACE(mesh.back());
    TrainerRun run = make_run(with_overrides(common, mesh));
    run.trainer->run();
    expect_text_run_near(*run.trainer, *reference.trainer);
  }
}

// Evaluation splits its rows over data x fsdp as training does (each rank its block of every eval
// batch): data=2 and fsdp=2 give the single-device run's losses, eval numbers and parameters.
TEST(TextData, EvaluationOverDataAndFsdpEqualsTheSingleDeviceRun) {
  if (Communicator::world().size() != 2) GTEST_SKIP() << "2 ranks";
  testing::SharedTempDir dir;
  const auto common = text_overrides(dir, "rows");
  TrainerRun reference = single_device_run(common, 2);
  for (const auto& mesh : std::vector<std::vector<std::string>>{
           {"ici_fsdp_parallelism=1", "ici_data_parallelism=2", "per_device_batch_size=1"},
           {"ici_fsdp_parallelism=2", "per_device_batch_size=1"}}) {
    SCOPED_TRACE(mesh[1]);
    TrainerRun run = make_run(with_overrides(common, mesh));
    run.trainer->run();
    expect_text_run_near(*run.trainer, *reference.trainer);
  }
}

TEST(TextData, ResumedRunIsBitIdentical) {
  const int world = Communicator::world().size();
  if (world > 2) GTEST_SKIP() << "1 or 2 ranks";
  testing::SharedTempDir dir;
  const std::vector<std::string> mesh =
      world == 1 ? std::vector<std::string>{"ici_fsdp_parallelism=1"}
                 : std::vector<std::string>{"ici_fsdp_parallelism=1", "ici_context_parallelism=2",
                                            "per_device_batch_size=0.5"};
  const auto common = with_overrides(
      text_overrides(dir, "whole"),
      {"enable_checkpointing=true", "checkpoint_period=2", "per_device_batch_size=1"});
  TrainerRun whole = make_run(with_overrides(common, mesh));
  whole.trainer->run();

  const auto split = with_overrides(with_overrides(common, {"run_name=split"}), mesh);
  {
    TrainerRun first = make_run(split);
    first.trainer->run(2);
  }
  TrainerRun second = make_run(split);
  EXPECT_EQ(second.trainer->step(), 2);
  second.trainer->run();
  ASSERT_EQ(second.trainer->history().size(), 2u);
  for (size_t i = 0; i < 2; ++i) {
    EXPECT_EQ(second.trainer->history()[i].loss, whole.trainer->history()[i + 2].loss) << i;
    EXPECT_EQ(second.trainer->history()[i].eval_loss, whole.trainer->history()[i + 2].eval_loss);
  }
  EXPECT_EQ(second.trainer->gather_parameters(), whole.trainer->gather_parameters());
  // The eval numbers reach the metrics file.
  if (Communicator::world().rank() == 0) {
    std::ifstream metrics(dir.path() / "whole" / "metrics.jsonl");
    const std::string text((std::istreambuf_iterator<char>(metrics)), {});
    EXPECT_NE(text.find("\"eval/avg_loss\""), std::string::npos);
    EXPECT_NE(text.find("\"eval/avg_perplexity\""), std::string::npos);
  }
}

}  // namespace
}  // namespace maxctx::train

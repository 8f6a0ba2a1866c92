// num_vocab_tiling (issue #31 part 4): the loss and the gradients of a step with the output head
// and loss in tiles against the untiled step on the same mesh, on 1 rank and on {context=2},
// {tensor=2} and {fsdp=2}.
//
// What must hold, and why: a token's logits, loss, lse and d_logits depend on its own row only
// (sgemm never splits K and gives each row the same roundings whatever the rows around it), so
// the loss, the accuracy and every gradient that flows through d(final norm output) are bit for
// bit the untiled ones. The output head's weight gradient alone sums the tiles' d_logitsᵀ · x in
// another order: within 1e-6 relative (max |difference| over max |gradient|). The gradients are
// read from AdamW's first moment after one step without clipping: m = (1 − b1) · g, elementwise.
// ctest runs this binary on 1 and 2 ranks; a case runs where the world size matches.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>

#include "maxctx/core/check.h"
#include "maxctx/mesh/mesh.h"
#include "maxctx/model/llama_config.h"
#include "maxctx/model/weights.h"
#include "maxctx/train/trainer.h"
#include "train_support.h"

namespace maxctx::train {
namespace {

using testing::MeshCase;

std::vector<MeshCase> mesh_cases() {
  return {
      {"single", 1, {"ici_fsdp_parallelism=1"}},
      {"context2", 2, {"ici_fsdp_parallelism=1", "ici_context_parallelism=2"}},
      {"tensor2", 2, {"ici_fsdp_parallelism=1", "ici_tensor_parallelism=2"}},
      {"fsdp2", 2, {"ici_fsdp_parallelism=2"}},
  };
}

struct Step {
  StepRecord record;
  Trainer::GatheredState state;
};

std::vector<std::string> overrides_of(const testing::SharedTempDir& dir, const std::string& tokens,
                                      const MeshCase& c, int64_t tiles) {
  std::vector<std::string> overrides = testing::with_overrides(
      testing::tiny_training_overrides(dir.path(), "vocab_tiling_" + std::to_string(tiles)),
      {"dataset_type=tokens", "dataset_path=" + tokens, "per_device_batch_size=1", "steps=1",
       "learning_rate_schedule_steps=1", "gradient_clipping_threshold=0",
       "num_vocab_tiling=" + std::to_string(tiles)});
  overrides.insert(overrides.end(), c.mesh.begin(), c.mesh.end());
  return overrides;
}

Step train_one_step(const testing::SharedTempDir& dir, const std::string& tokens, const MeshCase& c,
                    int64_t tiles) {
  const Config config = load_config(testing::kBaseConfig, overrides_of(dir, tokens, c, tiles),
                                    Communicator::world().size());
  const Mesh mesh = testing::mesh_of(config);  // the trainer holds on to it
  Trainer trainer(config, mesh, kernels::backend(Device::kCpu));
  trainer.run();
  return {trainer.history().at(0), trainer.gather_state()};
}

// The output head's elements in the unsharded layout (the weight list's order).
model::FlatRange head_range() {
  const Config config = load_config(testing::kBaseConfig, {"model_name=maxctx-tiny"}, 1);
  int64_t offset = 0;
  for (const model::WeightSpec& s : model::llama_weight_specs(model::llama_config_from(config))) {
    if (s.name == "lm_head.weight") return {offset, offset + s.numel()};
    offset += s.numel();
  }
  MAXCTX_CHECK(false, "maxctx-tiny has no lm_head.weight");
  return {};
}

class VocabTilingOnMesh : public ::testing::TestWithParam<MeshCase> {};

TEST_P(VocabTilingOnMesh, LossAndGradientsEqualTheUntiledStep) {
  const MeshCase& c = GetParam();
  if (Communicator::world().size() != c.ranks) GTEST_SKIP() << "needs " << c.ranks << " ranks";
  testing::SharedTempDir dir;
  const std::string tokens = testing::write_packed_token_file(dir.path());
  const Step untiled = train_one_step(dir, tokens, c, 1);
  const model::FlatRange head = head_range();
  // 48 tokens per device: tiles of 16 and 12 rows (and of 24 on tensor=2's 96 local tokens).
  for (const int64_t tiles : {3, 4}) {
    SCOPED_TRACE("num_vocab_tiling=" + std::to_string(tiles));
    const Step tiled = train_one_step(dir, tokens, c, tiles);
    // Bit for bit: the loss (every row's own), the accuracy (each tile's arg max) and the weight.
    EXPECT_EQ(tiled.record.loss, untiled.record.loss);
    EXPECT_EQ(tiled.record.accuracy, untiled.record.accuracy);
    EXPECT_EQ(tiled.record.total_weights, untiled.record.total_weights);
    EXPECT_LT(std::fabs(tiled.record.grad_norm - untiled.record.grad_norm),
              1e-6 * untiled.record.grad_norm);
    const std::vector<float>& g = untiled.state.adam_m;
    const std::vector<float>& t = tiled.state.adam_m;
    ASSERT_EQ(t.size(), g.size());
    ASSERT_LE(head.end, static_cast<int64_t>(g.size()));
    // Every gradient but the head's: the same bits.
    EXPECT_EQ(std::memcmp(t.data(), g.data(), head.begin * sizeof(float)), 0);
    EXPECT_EQ(std::memcmp(t.data() + head.end, g.data() + head.end,
                          (g.size() - head.end) * sizeof(float)),
              0);
    // The head's: the tiles summed in another order.
    double largest = 0.0, difference = 0.0;
    for (int64_t i = head.begin; i < head.end; ++i) {
      largest = std::max(largest, std::fabs(static_cast<double>(g[i])));
      difference = std::max(difference, std::fabs(static_cast<double>(t[i]) - g[i]));
    }
    if (Communicator::world().rank() == 0) {
      std::printf("%s, %lld tiles: head gradient max |difference| %.3g of max |g| %.3g\n",
                  c.name.c_str(), static_cast<long long>(tiles), difference, largest);
    }
    EXPECT_GT(largest, 0.0);
    EXPECT_LE(difference, 1e-6 * largest) << "head gradient, max |difference| " << difference;
  }
}

INSTANTIATE_TEST_SUITE_P(Meshes, VocabTilingOnMesh, ::testing::ValuesIn(mesh_cases()),
                         [](const auto& test_info) { return test_info.param.name; });

// MaxText's rule: the per-device tokens must split into whole tiles; the error names the key.
TEST(VocabTiling, TilesThatDoNotDivideTheDeviceTokensAreAnError) {
  try {
    load_config(testing::kBaseConfig,
                {"model_name=maxctx-tiny", "max_target_length=48", "per_device_batch_size=1",
                 "num_vocab_tiling=5"},
                1);
    FAIL() << "num_vocab_tiling=5 over 48 tokens was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("num_vocab_tiling = 5 must divide"), std::string::npos)
        << e.what();
  }
  EXPECT_THROW(
      load_config(testing::kBaseConfig, {"model_name=maxctx-tiny", "num_vocab_tiling=0"}, 1),
      Error);
}

}  // namespace
}  // namespace maxctx::train

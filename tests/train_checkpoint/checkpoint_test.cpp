// Training checkpoints: bit-exact round trips, the sharded layout (index.json, shard files a
// Hugging Face loader reads through the index), the older unsharded format still loading, which
// directories count as checkpoints, and a one-line error naming the file for every way a
// checkpoint can be wrong (truncated, missing file or tensor, another model, bad state.json).
//
// Every test works in its own directory under the system temp dir, removed afterwards.
#include "maxctx/train/checkpoint.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "maxctx/core/check.h"
#include "maxctx/core/rng.h"
#include "maxctx/io/safetensors.h"
#include "maxctx/io/sliced_tensors.h"
#include "maxctx/model/hf_import.h"
#include "maxctx/model/model_record.h"
#include "maxctx/model/weights.h"

namespace maxctx::train {
namespace {

namespace fs = std::filesystem;
using model::LlamaConfig;
using model::WeightSpec;

LlamaConfig small_config(bool tied = false) {
  LlamaConfig config;
  config.vocab_size = 50;
  config.emb_dim = 16;
  config.num_layers = 2;
  config.num_query_heads = 4;
  config.num_kv_heads = 2;
  config.head_dim = 4;
  config.mlp_dim = 24;
  config.tie_embeddings = tied;
  return config;
}

// Parameters and both moments of one model, random and distinct per buffer (seed), with the
// values a lossy round trip would change planted among them.
struct TrainingState {
  std::vector<WeightSpec> specs;
  std::vector<float> params;
  std::vector<float> adam_m;
  std::vector<float> adam_v;

  explicit TrainingState(const LlamaConfig& config, uint64_t seed = 1)
      : specs(model::llama_weight_specs(config)) {
    const size_t n = static_cast<size_t>(model::total_numel(specs));
    params.resize(n);
    adam_m.resize(n);
    adam_v.resize(n);
    rng::fill_normal(params, seed, rng::stream_id("params"), 0, 0.0f, 1.0f);
    rng::fill_normal(adam_m, seed, rng::stream_id("adam_m"), 0, 0.0f, 1e-3f);
    rng::fill_normal(adam_v, seed, rng::stream_id("adam_v"), 0, 0.0f, 1e-6f);
    for (float& v : adam_v) v = std::abs(v);
    // (NaN and Inf are refused on resume: NonFiniteValuesAreAnError.)
    const float specials[] = {-0.0f, std::numeric_limits<float>::denorm_min(),
                              std::numeric_limits<float>::max(), std::bit_cast<float>(0x00401234u),
                              -1e-38f};
    for (size_t i = 0; i < std::size(specials); ++i) params[i * 7] = specials[i];
  }

  // Buffers of the right size, filled with something no checkpoint holds.
  TrainingState empty_like() const {
    TrainingState out = *this;
    std::fill(out.params.begin(), out.params.end(), 12345.0f);
    std::fill(out.adam_m.begin(), out.adam_m.end(), 12345.0f);
    std::fill(out.adam_v.begin(), out.adam_v.end(), 12345.0f);
    return out;
  }
};

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

class CheckpointTest : public testing::Test {
 protected:
  void SetUp() override {
    const testing::TestInfo* info = testing::UnitTest::GetInstance()->current_test_info();
    std::string name = fmt::format("{}_{}", info->test_suite_name(), info->name());
    std::replace(name.begin(), name.end(), '/', '_');
    run_dir_ = fs::temp_directory_path() /
               fmt::format("maxctx_checkpoint_test_{}_{}", static_cast<int64_t>(::getpid()), name);
    fs::remove_all(run_dir_);
    fs::create_directories(run_dir_);
  }
  void TearDown() override {
    std::error_code ignored;
    fs::remove_all(run_dir_, ignored);
  }

  void write(const TrainingState& s, int64_t step, int64_t data_position = 0) {
    write_checkpoint(run_dir_, {step, data_position, "model_name: test"}, s.specs, s.params,
                     s.adam_m, s.adam_v);
  }
  CheckpointState read(TrainingState& s, int64_t step) {
    return read_checkpoint(run_dir_, step, s.specs, s.params, s.adam_m, s.adam_v);
  }
  // The maxctx::Error message of reading `step` into buffers for `config`; a test failure when
  // the read succeeds or the message is not one line.
  std::string read_error(int64_t step, const LlamaConfig& config = small_config()) {
    TrainingState into = TrainingState(config).empty_like();
    try {
      read(into, step);
    } catch (const Error& e) {
      const std::string message = e.what();
      EXPECT_EQ(message.find('\n'), std::string::npos) << message;
      return message;
    }
    ADD_FAILURE() << "reading step " << step << " succeeded";
    return "";
  }
  fs::path dir(int64_t step) const { return checkpoint_directory(run_dir_, step); }

  fs::path run_dir_;
};

void write_text(const fs::path& path, const std::string& text) {
  std::ofstream out(path, std::ios::trunc);
  out << text;
  ASSERT_TRUE(out.good()) << path;
}

#define EXPECT_CONTAINS(haystack, needle)                          \
  EXPECT_NE(std::string(haystack).find(needle), std::string::npos) \
      << "expected \"" << (needle) << "\" in: " << (haystack)

class CheckpointRoundTrip : public CheckpointTest, public testing::WithParamInterface<bool> {};

TEST_P(CheckpointRoundTrip, IsBitExact) {
  const LlamaConfig config = small_config(/*tied=*/GetParam());
  const TrainingState saved(config);
  write_checkpoint(run_dir_, {7, 4242, "model_name: test\nsteps: 7"}, saved.specs, saved.params,
                   saved.adam_m, saved.adam_v);

  TrainingState loaded = saved.empty_like();
  const CheckpointState state = read(loaded, 7);
  EXPECT_EQ(state.step, 7);
  EXPECT_EQ(state.data_position, 4242);
  EXPECT_EQ(state.config_text, "model_name: test\nsteps: 7");
  EXPECT_TRUE(same_bits(loaded.params, saved.params));
  EXPECT_TRUE(same_bits(loaded.adam_m, saved.adam_m));
  EXPECT_TRUE(same_bits(loaded.adam_v, saved.adam_v));
  EXPECT_EQ(latest_checkpoint_step(run_dir_), 7);
}

TEST_P(CheckpointRoundTrip, FilesHoldEveryTensorUnderItsNameAndGlobalShape) {
  const TrainingState saved(small_config(/*tied=*/GetParam()));
  write(saved, 3, 96);
  // One process saves every tensor whole: one shard file, one slice per tensor in the index.
  const io::SliceIndex index = io::read_slice_index_file(dir(3) / "index.json");
  ASSERT_EQ(index.size(), 3 * saved.specs.size());
  EXPECT_EQ(index.contains("lm_head.weight"), !GetParam());
  const io::SafetensorsFile shard(dir(3) / "shard-00000.safetensors");
  EXPECT_EQ(shard.metadata().at("format"), "maxctx-slices");
  for (const WeightSpec& spec : saved.specs) {
    const std::vector<int64_t> shape = spec.cols == 1 ? std::vector<int64_t>{spec.rows}
                                                      : std::vector<int64_t>{spec.rows, spec.cols};
    for (const std::string& name : {spec.name, "adam_m." + spec.name, "adam_v." + spec.name}) {
      const io::SlicedTensor& t = index.at(name);
      EXPECT_EQ(t.shape, shape) << name;
      EXPECT_EQ(t.dtype, io::StDType::kF32) << name;
      ASSERT_EQ(t.slices.size(), 1u) << name;
      EXPECT_EQ(t.slices[0].file.filename(), "shard-00000.safetensors");
      EXPECT_EQ(t.slices[0].byte_begin, shard.data_offset() + shard.info(name + "@0,0").begin);
    }
    const std::vector<float> m = shard.read_f32("adam_m." + spec.name + "@0,0", shape);
    EXPECT_EQ(std::memcmp(m.data(), saved.adam_m.data() + spec.offset, m.size() * sizeof(float)), 0)
        << spec.name;
  }
  std::ifstream state_file(dir(3) / "state.json");
  const nlohmann::json state = nlohmann::json::parse(state_file);
  EXPECT_EQ(state.at("format"), "maxctx-checkpoint-v2");
  EXPECT_EQ(state.at("step"), 3);
  EXPECT_EQ(state.at("data_position"), 96);
  EXPECT_EQ(state.at("num_ranks"), 1);
  EXPECT_EQ(state.at("config"), "model_name: test");
}

INSTANTIATE_TEST_SUITE_P(TiedAndUntied, CheckpointRoundTrip, testing::Bool(),
                         [](const testing::TestParamInfo<bool>& p) {
                           return p.param ? "Tied" : "Untied";
                         });

TEST_F(CheckpointTest, CheckpointLoadsAsWeightsThroughItsIndex) {
  const TrainingState saved(small_config());
  write(saved, 12);
  std::vector<float> loaded(saved.params.size(), 12345.0f);
  model::load_hf_weights(saved.specs, loaded.data(), dir(12));
  EXPECT_TRUE(same_bits(loaded, saved.params));
  // A tensor-parallel rank reads its block of the same file.
  const std::vector<WeightSpec> shard = model::llama_weight_specs(small_config(), 2, 1);
  std::vector<float> block(static_cast<size_t>(model::total_numel(shard)));
  model::load_hf_weights(shard, block.data(), dir(12));
  for (size_t i = 0; i < shard.size(); ++i) {
    const WeightSpec& s = shard[i];
    const WeightSpec& full = saved.specs[i];
    ASSERT_EQ(s.name, full.name);
    for (int64_t r = 0; r < s.rows; ++r) {
      for (int64_t c = 0; c < s.cols; ++c) {
        const float expected =
            saved.params[full.offset + (s.row_offset + r) * full.cols + s.col_offset + c];
        ASSERT_EQ(std::bit_cast<uint32_t>(block[s.offset + r * s.cols + c]),
                  std::bit_cast<uint32_t>(expected))
            << s.name << " (" << r << ", " << c << ")";
      }
    }
  }
}

TEST_F(CheckpointTest, RewritingAStepReplacesIt) {
  write(TrainingState(small_config(), 1), 10, 100);
  const TrainingState second(small_config(), 2);
  write(second, 10, 200);
  TrainingState loaded = second.empty_like();
  EXPECT_EQ(read(loaded, 10).data_position, 200);
  EXPECT_TRUE(same_bits(loaded.params, second.params));
  EXPECT_TRUE(same_bits(loaded.adam_v, second.adam_v));
  std::vector<std::string> entries;
  for (const auto& entry : fs::directory_iterator(run_dir_ / "checkpoints"))
    entries.push_back(entry.path().filename().string());
  EXPECT_EQ(entries, std::vector<std::string>{"10"});
}

TEST_F(CheckpointTest, LatestStepSkipsTemporaryAndIncompleteDirectories) {
  EXPECT_EQ(latest_checkpoint_step(run_dir_), std::nullopt);  // no checkpoints/ yet
  EXPECT_EQ(latest_checkpoint_step(run_dir_ / "never_created"), std::nullopt);
  const TrainingState s(small_config());
  for (const int64_t step : {5, 20, 10}) write(s, step);
  EXPECT_EQ(latest_checkpoint_step(run_dir_), 20);

  const fs::path root = run_dir_ / "checkpoints";
  // A crashed write of step 30: complete files, but still under its temporary name.
  fs::copy(dir(20), root / "30.tmp-999", fs::copy_options::recursive);
  write_text(root / "30.tmp-999" / "state.json",
             R"({"format": "maxctx-checkpoint-v2", "step": 30, "data_position": 0,
                 "num_ranks": 1, "config": ""})");
  // Step 40 lacks its index and shards; step 50 has them but an unparseable state.json;
  // "0070" is not a step name; a plain file named 80 is not a directory, nor is a dangling link
  // named 90.
  fs::create_directories(dir(40));
  write_text(dir(40) / "state.json",
             R"({"format": "maxctx-checkpoint-v2", "step": 40, "data_position": 0,
                 "num_ranks": 1, "config": ""})");
  fs::copy(dir(20), dir(50), fs::copy_options::recursive);
  write_text(dir(50) / "state.json", R"({"format": "maxctx-checkpoint-v2", "step": 5)");
  fs::copy(dir(20), root / "0070", fs::copy_options::recursive);
  write_text(root / "80", "not a checkpoint");
  fs::create_directory_symlink(root / "no_such_directory", root / "90");
  // A damaged newest checkpoint is an error naming it, never a silent resume from step 20
  // (issue #21, defect 7); once it is moved away, the next damaged one is named, then 20 wins.
  const auto latest_error = [&] {
    try {
      latest_checkpoint_step(run_dir_);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_CONTAINS(latest_error(), "the newest checkpoint '" + dir(50).string() + "' is damaged");
  EXPECT_CONTAINS(latest_error(), (dir(50) / "state.json").string() + "' is not valid JSON");
  EXPECT_CONTAINS(latest_error(), "move it away to resume from checkpoint 20");
  fs::remove_all(dir(50));
  EXPECT_CONTAINS(latest_error(), (dir(40) / "index.json").string());
  fs::remove_all(dir(40));
  EXPECT_EQ(latest_checkpoint_step(run_dir_), 20);

  // The next write cleans up the debris of the crashed one.
  write(s, 25);
  EXPECT_EQ(latest_checkpoint_step(run_dir_), 25);
  EXPECT_FALSE(fs::exists(root / "30.tmp-999"));
}

// max_num_checkpoints_to_keep: the oldest complete checkpoints go, the newest `keep` stay; 0
// keeps all.
TEST_F(CheckpointTest, RemoveOldCheckpointsKeepsTheNewest) {
  const TrainingState s(small_config());
  for (const int64_t step : {2, 4, 6, 8}) write(s, step);
  const auto steps_on_disk = [&] {
    std::vector<std::string> names;
    for (const auto& entry : fs::directory_iterator(run_dir_ / "checkpoints"))
      names.push_back(entry.path().filename().string());
    std::sort(names.begin(), names.end());
    return names;
  };
  remove_old_checkpoints(run_dir_, 0);
  EXPECT_EQ(steps_on_disk(), (std::vector<std::string>{"2", "4", "6", "8"}));
  remove_old_checkpoints(run_dir_, 2);
  EXPECT_EQ(steps_on_disk(), (std::vector<std::string>{"6", "8"}));
  remove_old_checkpoints(run_dir_, 1);
  EXPECT_EQ(steps_on_disk(), (std::vector<std::string>{"8"}));
  EXPECT_EQ(latest_checkpoint_step(run_dir_), 8);
}

// A NaN or Inf in a weight or a moment is refused on resume, naming the checkpoint and tensor.
TEST_F(CheckpointTest, NonFiniteValuesAreAnError) {
  TrainingState s(small_config());
  s.adam_v[s.specs[1].offset + 3] = std::numeric_limits<float>::quiet_NaN();
  write(s, 10);
  std::string message = read_error(10);
  EXPECT_CONTAINS(message, dir(10).string() + "': tensor 'adam_v." + s.specs[1].name +
                               "' holds a non-finite value (NaN or Inf) at element 3");
  s.adam_v[s.specs[1].offset + 3] = 0.0f;
  s.params[s.specs[0].offset] = -std::numeric_limits<float>::infinity();
  write(s, 10);
  message = read_error(10);
  EXPECT_CONTAINS(message, dir(10).string() + "': tensor '" + s.specs[0].name +
                               "' holds a non-finite value (NaN or Inf) at element 0");
}

TEST_F(CheckpointTest, TruncatedShardFileIsAnError) {
  write(TrainingState(small_config()), 10);
  const fs::path shard_file = dir(10) / "shard-00000.safetensors";
  fs::resize_file(shard_file, fs::file_size(shard_file) / 2);
  const std::string message = read_error(10);
  EXPECT_CONTAINS(message, shard_file.string());
  EXPECT_CONTAINS(message, "truncated");
  EXPECT_THROW(latest_checkpoint_step(run_dir_), Error);  // damaged, not "no checkpoint"
}

TEST_F(CheckpointTest, MissingShardFileIsAnError) {
  write(TrainingState(small_config()), 10);
  fs::remove(dir(10) / "shard-00000.safetensors");
  const std::string message = read_error(10);
  EXPECT_CONTAINS(message, (dir(10) / "shard-00000.safetensors").string());
  EXPECT_CONTAINS(message, "is missing");
  EXPECT_THROW(latest_checkpoint_step(run_dir_), Error);  // damaged, not "no checkpoint"
}

TEST_F(CheckpointTest, CheckpointOfAnotherModelIsAnError) {
  struct Case {
    const char* what;
    std::function<void(LlamaConfig&)> writer_change;
    std::vector<std::string> expected;
  };
  const std::vector<Case> cases = {
      {"larger vocabulary",
       [](LlamaConfig& c) { c.vocab_size = 60; },
       {"tensor 'model.embed_tokens.weight' has shape [60, 16]", "expects [50, 16]",
        "different model configuration"}},
      {"wider MLP",
       [](LlamaConfig& c) { c.mlp_dim = 32; },
       {"'model.layers.0.mlp.gate_proj.weight' has shape [32, 16]", "expects [24, 16]"}},
      {"one more layer",
       [](LlamaConfig& c) { c.num_layers = 3; },
       {"holds tensor 'model.layers.2.", "does not have"}},
      {"tied embeddings",
       [](LlamaConfig& c) { c.tie_embeddings = true; },
       {dir(10).string(), "has no tensor 'lm_head.weight'"}},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    LlamaConfig other = small_config();
    c.writer_change(other);
    fs::remove_all(run_dir_ / "checkpoints");
    write(TrainingState(other), 10);
    const std::string message = read_error(10);
    for (const std::string& expected : c.expected) EXPECT_CONTAINS(message, expected);
  }
  // The other way round: an untied checkpoint read by a tied model has a tensor too many.
  fs::remove_all(run_dir_ / "checkpoints");
  write(TrainingState(small_config()), 10);
  EXPECT_CONTAINS(read_error(10, small_config(/*tied=*/true)), "holds tensor 'lm_head.weight'");
}

// Writes `s` as checkpoint `step` in the older, unsharded layout (maxctx-checkpoint-v1: whole
// tensors in model.safetensors and optimizer.safetensors), the moments' list edited by `edit`.
void write_unsharded(const fs::path& run_dir, int64_t step, const TrainingState& s,
                     const std::function<void(std::vector<io::TensorToWrite>&)>& edit) {
  const fs::path dir = checkpoint_directory(run_dir, step);
  fs::create_directories(dir);
  std::vector<io::TensorToWrite> weights, moments;
  for (const WeightSpec& spec : s.specs) {
    const std::vector<int64_t> shape = spec.cols == 1 ? std::vector<int64_t>{spec.rows}
                                                      : std::vector<int64_t>{spec.rows, spec.cols};
    const auto slice = [&](const std::vector<float>& flat) {
      return std::span<const float>(flat).subspan(spec.offset, spec.numel());
    };
    weights.push_back(io::tensor_to_write(spec.name, io::StDType::kF32, shape, slice(s.params)));
    moments.push_back(
        io::tensor_to_write("adam_m." + spec.name, io::StDType::kF32, shape, slice(s.adam_m)));
    moments.push_back(
        io::tensor_to_write("adam_v." + spec.name, io::StDType::kF32, shape, slice(s.adam_v)));
  }
  edit(moments);
  io::write_safetensors(dir / "model.safetensors", weights, {{"format", "pt"}});
  io::write_safetensors(dir / "optimizer.safetensors", moments, {{"format", "pt"}});
  write_text(dir / "state.json",
             fmt::format(R"({{"format": "maxctx-checkpoint-v1", "step": {}, "data_position": 7,
                             "config": "old"}})",
                         step));
}

TEST_F(CheckpointTest, UnshardedCheckpointsStillLoad) {
  const TrainingState s(small_config());
  write_unsharded(run_dir_, 10, s, [](std::vector<io::TensorToWrite>&) {});
  EXPECT_EQ(latest_checkpoint_step(run_dir_), 10);
  TrainingState loaded = s.empty_like();
  const CheckpointState state = read(loaded, 10);
  EXPECT_FALSE(state.sharded);
  EXPECT_EQ(state.data_position, 7);
  EXPECT_TRUE(same_bits(loaded.params, s.params));
  EXPECT_TRUE(same_bits(loaded.adam_m, s.adam_m));
  EXPECT_TRUE(same_bits(loaded.adam_v, s.adam_v));
}

TEST_F(CheckpointTest, MissingOrNonF32OptimizerTensorIsAnError) {
  const TrainingState s(small_config());
  write_unsharded(run_dir_, 10, s, [](std::vector<io::TensorToWrite>& tensors) {
    std::erase_if(tensors, [](const auto& t) { return t.name == "adam_m.model.norm.weight"; });
  });
  std::string message = read_error(10);
  EXPECT_CONTAINS(message, dir(10).string());
  EXPECT_CONTAINS(message, "has no tensor 'adam_m.model.norm.weight'");

  const std::vector<uint16_t> bf16_ones(16, 0x3f80);
  write_unsharded(run_dir_, 10, s, [&](std::vector<io::TensorToWrite>& tensors) {
    for (io::TensorToWrite& t : tensors) {
      if (t.name == "adam_v.model.norm.weight") {
        t = io::tensor_to_write(t.name, io::StDType::kBF16, {16}, std::span(bf16_ones));
      }
    }
  });
  message = read_error(10);
  EXPECT_CONTAINS(message,
                  "tensor 'adam_v.model.norm.weight' is BF16, this run keeps its weights in F32");
}

TEST_F(CheckpointTest, BadStateJsonIsAnError) {
  struct Case {
    const char* text;
    const char* expected;
  };
  const Case cases[] = {
      {R"({"format": "maxctx-checkpoint-v1", "step": 10,)", "is not valid JSON"},
      {"[10, 0]", "is a JSON array, expected an object"},
      {R"({"format": "maxctx-checkpoint-v1", "data_position": 0, "config": ""})",
       "has no \"step\""},
      {R"({"format": "orbax", "step": 10, "data_position": 0, "config": ""})",
       "has format \"orbax\", expected \"maxctx-checkpoint-v2\""},
      {R"({"format": "maxctx-checkpoint-v1", "step": 10, "data_position": -4, "config": ""})",
       "\"data_position\" is -4, expected an integer in [0, 2^62]"},
      // 2^63 - 1 rows overflowed the data stream's row arithmetic (issue #34 N11).
      {R"({"format": "maxctx-checkpoint-v1", "step": 10, "data_position": 9223372036854775807,
           "config": ""})",
       "\"data_position\" is 9223372036854775807, expected an integer in [0, 2^62]"},
      // Nested past the JSON depth bound: refused before a tree is built (issue #34 N4).
      {"{\"format\": [[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[["
       "]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]}",
       "nested deeper than 64 levels"},
      {R"({"format": "maxctx-checkpoint-v1", "step": "10", "data_position": 0, "config": ""})",
       "\"step\" is \"10\", expected an integer in [0, 2^62]"},
      {R"({"format": "maxctx-checkpoint-v1", "step": 11, "data_position": 0, "config": ""})",
       "says step 11, but its directory is step 10"},
      {R"({"format": "maxctx-checkpoint-v1", "step": 10, "data_position": 0, "config": 5})",
       "\"config\" is 5, expected a string"},
  };
  write(TrainingState(small_config()), 10);
  const fs::path state_file = dir(10) / "state.json";
  for (const Case& c : cases) {
    SCOPED_TRACE(c.text);
    write_text(state_file, c.text);
    const std::string message = read_error(10);
    EXPECT_CONTAINS(message, state_file.string());
    EXPECT_CONTAINS(message, c.expected);
    // The only checkpoint is damaged: resuming is refused, naming it (not a fresh start).
    try {
      latest_checkpoint_step(run_dir_);
      ADD_FAILURE() << "a damaged newest checkpoint was accepted";
    } catch (const Error& e) {
      EXPECT_CONTAINS(e.what(), state_file.string());
      EXPECT_CONTAINS(e.what(), "move it away to resume from the start");
    }
  }
  fs::remove(state_file);
  const std::string message = read_error(10);
  EXPECT_CONTAINS(message, state_file.string());
  EXPECT_CONTAINS(message, "is missing");
}

// state.json records the model (model/model_record.h): written, read back field for field, and
// compared with a running model naming the field and both values.
TEST_F(CheckpointTest, StateRecordsTheModel) {
  LlamaConfig recorded = small_config(/*tied=*/true);
  recorded.norm_eps = 1e-6f;
  recorded.rope.theta = 100000.0;
  recorded.rope.scaling = kernels::RopeScaling::kLlama3;
  recorded.rope.factor = 4.0;
  const TrainingState s(recorded);
  CheckpointState state{10, 3, "model_name: test"};
  state.model = recorded;
  write_checkpoint(run_dir_, state, s.specs, s.params, s.adam_m, s.adam_v);
  const OpenCheckpoint opened = open_checkpoint(run_dir_, 10);
  ASSERT_TRUE(opened.state.model.has_value());
  EXPECT_EQ(model::model_difference(recorded, *opened.state.model), std::nullopt);
  EXPECT_EQ(opened.state.model->norm_eps, 1e-6f);
  EXPECT_EQ(opened.state.model->rope.factor, 4.0);
  std::ifstream in(dir(10) / "state.json");
  const nlohmann::json json = nlohmann::json::parse(in);
  EXPECT_EQ(json.at("model").at("norm_eps"), 1e-6);  // the shortest decimal, not the float's
  EXPECT_EQ(json.at("model").at("rope_type"), "llama3");
  EXPECT_FALSE(json.at("model").contains("num_experts"));  // only what the model has

  LlamaConfig running = recorded;
  running.rope.theta = 10000.0;
  EXPECT_EQ(model::model_difference(recorded, running),
            "the checkpoint's model has rope_theta 100000.0, this run's has 10000.0 (config key "
            "rope_max_timescale)");
  running = recorded;
  running.num_layers = 3;
  EXPECT_CONTAINS(*model::model_difference(recorded, running), "num_layers 2, this run's has 3");
  const std::set<std::string> rope_only = {"rope_max_timescale"};
  EXPECT_EQ(model::model_difference(recorded, running, &rope_only), std::nullopt);
  running = recorded;
  running.rope.scaling = kernels::RopeScaling::kNone;
  EXPECT_CONTAINS(*model::model_difference(recorded, running), "rope_type \"llama3\"");

  // Without a record (a checkpoint written before it existed): none, and it still loads.
  write(s, 20);
  EXPECT_FALSE(open_checkpoint(run_dir_, 20).state.model.has_value());
}

TEST_F(CheckpointTest, BadModelRecordIsAnError) {
  const nlohmann::json good = model::model_record(small_config());
  const auto error = [](const nlohmann::json& record) {
    try {
      model::model_from_record(record, "state.json");
    } catch (const Error& e) {
      EXPECT_EQ(std::string(e.what()).find('\n'), std::string::npos);
      return std::string(e.what());
    }
    return std::string("accepted");
  };
  EXPECT_EQ(error(good), "accepted");
  nlohmann::json record = good;
  record.erase("head_dim");
  EXPECT_CONTAINS(error(record), "the model record has no \"head_dim\"");
  record = good;
  record["mlp_width"] = 3;
  EXPECT_CONTAINS(error(record), "unknown field \"mlp_width\"");
  record = good;
  record["num_layers"] = -2;
  EXPECT_CONTAINS(error(record), "\"num_layers\" is -2, expected an integer in [1, 2^31 - 1]");
  record = good;
  record["rope_theta"] = "big";
  EXPECT_CONTAINS(error(record), "\"rope_theta\" is \"big\", expected a positive number");
  record = good;
  record["num_experts"] = 8;  // a dense model has no experts
  EXPECT_CONTAINS(error(record), "\"num_experts\" is recorded for a model that does not have it");
  record = good;
  record["vocab_size"] = 2147483647;
  record["emb_dim"] = 2147483647;
  record["num_layers"] = 2147483647;
  EXPECT_CONTAINS(error(record), "more than 2^62");
  EXPECT_CONTAINS(error(nlohmann::json::array()), "expected an object");
}

TEST_F(CheckpointTest, NonexistentStepIsAnError) {
  std::string message = read_error(7);
  EXPECT_CONTAINS(message, "checkpoint step 7 does not exist");
  EXPECT_CONTAINS(message, dir(7).string());
  EXPECT_CONTAINS(message, ": none");
  const TrainingState s(small_config());
  write(s, 20);
  write(s, 10);
  fs::create_directories(run_dir_ / "checkpoints" / "7.tmp-1");  // a temporary is not step 7
  message = read_error(7);
  EXPECT_CONTAINS(message, "checkpoint step 7 does not exist");
  EXPECT_CONTAINS(message,
                  "complete checkpoints in '" + (run_dir_ / "checkpoints").string() + "': 10, 20");
}

TEST_F(CheckpointTest, ShardedSpecsAndWrongBufferSizesAreRejected) {
  set_check_handler([](const std::string& m) { throw std::logic_error(m); });
  const auto check_message = [](const std::function<void()>& call) -> std::string {
    try {
      call();
    } catch (const std::logic_error& e) {
      return e.what();
    }
    return "";
  };
  const TrainingState s(small_config());
  const std::vector<WeightSpec> shard = model::llama_weight_specs(small_config(), 2, 0);
  const std::vector<float> shard_buffer(static_cast<size_t>(model::total_numel(shard)));
  EXPECT_CONTAINS(check_message([&] {
                    write_checkpoint(run_dir_, {}, shard, shard_buffer, shard_buffer, shard_buffer);
                  }),
                  "is a 8x16 block of 16x16");
  const std::vector<float> short_buffer(s.params.size() - 1);
  EXPECT_CONTAINS(check_message([&] {
                    write_checkpoint(run_dir_, {}, s.specs, s.params, short_buffer, s.adam_v);
                  }),
                  "adam_m buffer");
  set_check_handler({});
  EXPECT_FALSE(fs::exists(run_dir_ / "checkpoints"));
}

}  // namespace
}  // namespace maxctx::train

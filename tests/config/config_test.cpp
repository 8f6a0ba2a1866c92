// Config loading: inheritance, model presets, overrides and their casts, environment variables,
// derived values, every error path, and the docs/config.md <-> keys.h agreement.
#include "maxctx/config/config.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <sstream>
#include <string>
#include <vector>

#include "maxctx/core/check.h"
#include "maxctx/mesh/axis.h"

namespace maxctx {
namespace {

namespace fs = std::filesystem;

const std::string kBase = std::string(MAXCTX_SOURCE_DIR) + "/configs/base.yml";
const std::string kInference = std::string(MAXCTX_SOURCE_DIR) + "/configs/inference.yml";

// The message of the maxctx::Error that loading throws ("" when it loads).
std::string load_error(const std::string& path, const std::vector<std::string>& overrides,
                       int64_t devices = 1) {
  try {
    load_config(path, overrides, devices);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

class TempDir {
 public:
  TempDir() {
    path_ = fs::temp_directory_path() /
            ("maxctx_config_test_" + std::to_string(::getpid()) + "_" + std::to_string(next_++));
    fs::create_directories(path_);
  }
  ~TempDir() { fs::remove_all(path_); }
  std::string write(const std::string& name, const std::string& text) const {
    const fs::path file = path_ / name;
    fs::create_directories(file.parent_path());
    std::ofstream(file) << text;
    return file.string();
  }

 private:
  fs::path path_;
  static inline int next_ = 0;
};

TEST(Config, BaseLoadsWithMaxTextDefaults) {
  const Config c = load_config(kBase, {}, 1);
  EXPECT_EQ(c.max_target_length, 2048);
  EXPECT_EQ(c.steps, 150001);
  EXPECT_EQ(c.learning_rate_schedule_steps, 150001);  // -1 takes steps
  EXPECT_DOUBLE_EQ(c.per_device_batch_size, 12.0);
  EXPECT_EQ(c.ici_fsdp_parallelism, -1);
  EXPECT_EQ(c.dcn_data_parallelism, -1);
  EXPECT_EQ(c.context_parallel_strategy, "all_gather");
  EXPECT_TRUE(c.context_parallel_load_balance);
  EXPECT_EQ(c.derived.emb_dim, 2048);
  EXPECT_EQ(c.derived.global_batch_size_to_train_on, 12);
}

// The enums follow keys.h's allowed lists in order: every value reads back as its enumerator.
TEST(Config, ChoiceKeysReadAsTheirEnums) {
  Config c;
  const auto set = [&](const char* strategy, const char* dataset, const char* hardware,
                       const char* decode) {
    c.context_parallel_strategy = strategy;
    c.dataset_type = dataset;
    c.hardware = hardware;
    c.context_autoregressive_decode = decode;
  };
  set("all_gather", "synthetic", "cpu", "sequence");
  EXPECT_EQ(context_parallel_strategy(c), ContextParallelStrategy::kAllGather);
  EXPECT_EQ(dataset_type(c), DatasetType::kSynthetic);
  EXPECT_EQ(hardware_kind(c), HardwareKind::kCpu);
  EXPECT_EQ(context_autoregressive_decode(c), DecodeSharding::kSequence);
  set("ring", "tokens", "gpu", "batch");
  EXPECT_EQ(context_parallel_strategy(c), ContextParallelStrategy::kRing);
  EXPECT_EQ(dataset_type(c), DatasetType::kTokens);
  EXPECT_EQ(hardware_kind(c), HardwareKind::kGpu);
  EXPECT_EQ(context_autoregressive_decode(c), DecodeSharding::kBatch);
  set("ring", "recall", "gpu_multiprocess", "batch");
  EXPECT_EQ(dataset_type(c), DatasetType::kRecall);
  EXPECT_EQ(hardware_kind(c), HardwareKind::kGpuMultiprocess);
  set("ring", "hf", "tpu", "batch");
  EXPECT_EQ(dataset_type(c), DatasetType::kHf);
  EXPECT_EQ(hardware_kind(c), HardwareKind::kTpu);
  c.context_parallel_strategy = "rings";
  EXPECT_THROW(context_parallel_strategy(c), Error);
}

TEST(Config, BaseYmlRestatesTheDeclaredDefaults) {
  // base.yml may only restate defaults: the declaration list is the one source of them.
  const Config loaded = load_config(kBase, {}, 1);
  const Config declared;
  std::ifstream in(kBase);
  std::string line;
  int restated = 0;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#' || line[0] == ' ') continue;
    const std::string key = line.substr(0, line.find(':'));
    if (key == "base_config") continue;
    if (key == "steps") continue;  // also derives learning_rate_schedule_steps; checked above
    EXPECT_EQ(format_value(loaded, key), format_value(declared, key)) << key;
    ++restated;
  }
  EXPECT_GT(restated, 20);
}

TEST(Config, InheritanceChildOverridesParent) {
  TempDir dir;
  dir.write("parent.yml", "max_target_length: 512\nsteps: 7\nrun_name: parent\n");
  const std::string child = dir.write("sub/child.yml", "base_config: ../parent.yml\nsteps: 9\n");
  const Config c = load_config(child, {}, 1);
  EXPECT_EQ(c.max_target_length, 512);
  EXPECT_EQ(c.steps, 9);
  EXPECT_EQ(c.run_name, "parent");
  ASSERT_EQ(c.sources.size(), 2u);
  // base_config falls back to the project's configs/ directory.
  const Config from_shipped = load_config(dir.write("x.yml", "base_config: base.yml\n"), {}, 1);
  EXPECT_EQ(from_shipped.max_target_length, 2048);
}

TEST(Config, InheritanceErrors) {
  TempDir dir;
  const std::string a = dir.write("a.yml", "base_config: b.yml\n");
  dir.write("b.yml", "base_config: a.yml\n");
  EXPECT_NE(load_error(a, {}).find("inherits from itself"), std::string::npos);
  const std::string missing = dir.write("m.yml", "base_config: nowhere.yml\n");
  EXPECT_NE(load_error(missing, {}).find("'nowhere.yml'"), std::string::npos);
  EXPECT_NE(load_error(dir.write("bad.yml", "steps: [1\n"), {}).find("not valid YAML"),
            std::string::npos);
  EXPECT_NE(load_error(dir.write("list.yml", "- 1\n- 2\n"), {}).find("mapping"), std::string::npos);
  EXPECT_NE(load_error("/nonexistent/maxctx.yml", {}).find("does not exist"), std::string::npos);
  // A key that is not a name (YAML's complex keys; found by fuzz_yaml_config) is one error.
  EXPECT_NE(load_error(dir.write("complex_key.yml", "? [a, b]\n: 1\n"), {}).find("is not a name"),
            std::string::npos);
  EXPECT_NE(load_error(dir.write("map_key.yml", "? {a: 1}\n: 1\n"), {}).find("is not a name"),
            std::string::npos);
  // A name longer than the system looks up is not found, not a filesystem exception (found by
  // fuzz_yaml_config).
  const std::string long_name(300, 'b');
  EXPECT_NE(load_error(dir.write("long_base.yml", "base_config: " + long_name + "\n"), {})
                .find("not found"),
            std::string::npos);
  EXPECT_NE(load_error(dir.write("long_model.yml", "steps: 3\n"), {"model_name=" + long_name})
                .find(long_name),
            std::string::npos);
  // A key given twice in a file is refused (the command line follows MaxText: the later wins).
  EXPECT_NE(load_error(dir.write("twice.yml", "steps: 3\nsteps: 5\n"), {})
                .find("sets 'steps' twice; give each key once"),
            std::string::npos);
  // A second YAML document is refused, not ignored (issue #34 N16).
  EXPECT_NE(load_error(dir.write("two_docs.yml", "steps: 3\n---\nsteps: 5\n"), {})
                .find("holds 2 YAML documents"),
            std::string::npos);
  // A text on which yaml-cpp's LoadAll never returns (fuzz_yaml_config) is read at once, as
  // yaml-cpp reads it: a null document, so the same as an empty file.
  EXPECT_EQ(load_error(dir.write("no_end.yml", ",mara# mara"), {}),
            load_error(dir.write("empty.yml", ""), {}));
}

// A base_config naming a device or a FIFO is refused before it is read (it would never end).
TEST(Config, BaseConfigMustBeARegularFile) {
  TempDir dir;
  const std::string path = dir.write("child.yml", "base_config: /dev/zero\nsteps: 3\n");
  EXPECT_NE(load_error(path, {}).find(
                "config file '/dev/zero' is a character device, not a regular file"),
            std::string::npos);
}

TEST(Config, UnknownKeysNameTheClosestKey) {
  const std::string cli = load_error(kBase, {"max_target_lenght=4"});
  EXPECT_NE(cli.find("unknown config key 'max_target_lenght'"), std::string::npos) << cli;
  EXPECT_NE(cli.find("did you mean 'max_target_length'"), std::string::npos) << cli;
  EXPECT_EQ(cli.find('\n'), std::string::npos) << "one line";
  EXPECT_NE(load_error(kBase, {"no_such_key=1"}).find("unknown config key 'no_such_key'"),
            std::string::npos);
  TempDir dir;
  const std::string file =
      dir.write("typo.yml", "base_config: base.yml\nici_contxt_parallelism: 2\n");
  const std::string in_file = load_error(file, {});
  EXPECT_NE(in_file.find("did you mean 'ici_context_parallelism'"), std::string::npos) << in_file;
  EXPECT_NE(in_file.find("typo.yml"), std::string::npos) << in_file;
  EXPECT_EQ(closest_key("learningrate"), "learning_rate");
  // A far name is never suggested: nothing near gives a line saying so, a shared word suggests
  // a key with that word.
  EXPECT_EQ(closest_key("zzzzzzzzzzzz"), "");
  EXPECT_NE(load_error(kBase, {"zzzzzzzzzzzz=1"}).find("no key has a similar name"),
            std::string::npos);
  EXPECT_NE(closest_key("scan_layers").find("layers"), std::string::npos)
      << closest_key("scan_layers");
}

TEST(Config, OverridesAreCastToTheKeysType) {
  const Config c = load_config(
      kBase,
      {"max_target_length=4096", "learning_rate=1e-3", "packing=false", "run_name=my run",
       "prompt=a=b: c", "mlp_activations=[silu, linear]", "per_device_batch_size=2"},
      4);
  EXPECT_EQ(c.max_target_length, 4096);
  EXPECT_DOUBLE_EQ(c.learning_rate, 1e-3);
  EXPECT_FALSE(c.packing);
  EXPECT_EQ(c.run_name, "my run");
  EXPECT_EQ(c.prompt, "a=b: c");
  EXPECT_EQ(c.derived.global_batch_size_to_train_on, 8);
  EXPECT_EQ(load_config(kBase, {"steps=1_000"}, 1).steps, 1000);
}

TEST(Config, BadValuesSayWhatIsAllowed) {
  const std::string not_int = load_error(kBase, {"max_target_length=abc"});
  EXPECT_NE(not_int.find("'abc' is not an integer"), std::string::npos) << not_int;
  EXPECT_NE(load_error(kBase, {"max_target_length=1.5"}).find("not an integer"), std::string::npos);
  EXPECT_NE(load_error(kBase, {"learning_rate=fast"}).find("not a number"), std::string::npos);
  EXPECT_NE(load_error(kBase, {"packing=maybe"}).find("use true or false"), std::string::npos);
  const std::string choice = load_error(kBase, {"context_parallel_strategy=ulysses"});
  EXPECT_NE(choice.find("use one of: all_gather, ring"), std::string::npos) << choice;
  EXPECT_NE(load_error(kBase, {"quantization=int4"}).find("use one of: '', int8"),
            std::string::npos);
  EXPECT_NE(load_error(kBase, {"dtype=float16"}).find("use one of: float32, bfloat16"),
            std::string::npos);
  EXPECT_NE(load_error(kBase, {"weight_dtype=fp8"}).find("use one of: float32, bfloat16"),
            std::string::npos);
  EXPECT_NE(load_error(kBase, {"max_target_length=0"}).find("must be positive"), std::string::npos);
  EXPECT_NE(load_error(kBase, {"steps=-2"}).find("steps = -2 is negative"), std::string::npos);
  EXPECT_NE(load_error(kBase, {"steps"}).find("not key=value"), std::string::npos);
  EXPECT_NE(load_error(kBase, {"global_parameter_scale=3"}).find("power of two"),
            std::string::npos);
  EXPECT_NE(load_error(kBase, {"base_num_query_heads=6", "base_num_kv_heads=4"})
                .find("multiple of num_kv_heads"),
            std::string::npos);
  EXPECT_NE(load_error(kBase, {"mlp_activations=gelu"}).find("SwiGLU"), std::string::npos);
  EXPECT_NE(load_error(kBase, {"head_dim=7"}).find("even"), std::string::npos);
  EXPECT_NE(load_error(kBase, {"sliding_window_size=64"}).find("attention_type=local_sliding"),
            std::string::npos);
  EXPECT_NE(load_error(kBase, {"attention_type=local_sliding"}).find("needs sliding_window_size"),
            std::string::npos);
}

// MaxText keys that steer only XLA/TPU here (issue #17): accepted with MaxText's values,
// validated as MaxText would, and a value the engine cannot honour is one clear error.
// MaxText's command-line rule: a key given twice takes the later value (the seed's training line
// gives profiler=xplane twice), with one note line when the values differ; a file's repeated key
// stays an error (InheritanceErrors).
TEST(Config, ACommandLineKeyGivenTwiceTakesTheLaterValue) {
  ::testing::internal::CaptureStdout();
  // Every other key keeps its own value (the first version shifted YAML nodes over each other
  // and gave model_name run_name's value).
  const Config c = load_config(kBase,
                               {"steps=1", "profiler=xplane", "model_name=maxctx-tiny",
                                "run_name=abc", "steps=2", "log_period=7", "profiler=xplane"},
                               1);
  const std::string printed = ::testing::internal::GetCapturedStdout();
  EXPECT_EQ(c.steps, 2);
  EXPECT_EQ(c.profiler, "xplane");
  EXPECT_EQ(c.model_name, "maxctx-tiny");
  EXPECT_EQ(c.run_name, "abc");
  EXPECT_EQ(c.log_period, 7);
  EXPECT_NE(printed.find("note: config key 'steps' is given twice on the command line; the later "
                         "value '2' is used, not '1'"),
            std::string::npos)
      << printed;
  EXPECT_EQ(printed.find("'profiler'"), std::string::npos) << "same value: no note";
  // The later value is still checked.
  EXPECT_NE(load_error(kBase, {"steps=1", "steps=x"}).find("steps"), std::string::npos);
}

// MaxText's Mixtral presets give base_moe_mlp_dim; every maxctx MoE layer is an MoE layer, so
// it must equal base_mlp_dim (MaxText's rule for a fully-MoE model). Without experts it is unused.
TEST(Config, BaseMoeMlpDimFollowsMaxTextsRule) {
  const Config c = load_config(kBase,
                               {"decoder_block=mixtral", "num_experts=4", "num_experts_per_tok=2",
                                "base_mlp_dim=96", "base_moe_mlp_dim=96", "enable_dropout=false"},
                               1);
  EXPECT_EQ(c.derived.mlp_dim, 96);
  EXPECT_NE(load_error(kBase, {"decoder_block=mixtral", "num_experts=4", "base_mlp_dim=96",
                               "base_moe_mlp_dim=64"})
                .find("base_moe_mlp_dim = 64 must equal base_mlp_dim = 96 when num_experts > 1"),
            std::string::npos);
  EXPECT_EQ(load_config(kBase, {"base_moe_mlp_dim=64"}, 1).derived.mlp_dim, 7168);
  EXPECT_EQ(load_config(kBase, {"model_name=mixtral-8x7b"}, 1).base_moe_mlp_dim, 14336);
}

// Every key of MaxText's own Llama 2/3, Mistral and Mixtral presets (maxtext 0.2.5's
// configs/models/, fetched by tools/reference/fetch_assets.sh; skipped without them) loads, each
// preset over maxctx's base.yml: logical_axis_rules, enable_dropout and base_moe_mlp_dim included.
TEST(Config, MaxTextsLlamaMistralMixtralPresetsLoad) {
  const char* env = std::getenv("MAXCTX_ASSETS");
  const char* home = std::getenv("HOME");
  const fs::path presets = (env != nullptr    ? fs::path(env)
                            : home != nullptr ? fs::path(home) / ".cache/maxctx/assets"
                                              : fs::path("/nonexistent")) /
                           "configs/models";
  if (!fs::exists(presets / "mixtral-8x7b.yml")) {
    GTEST_SKIP() << presets << " holds no MaxText presets (tools/reference/fetch_assets.sh)";
  }
  TempDir dir;
  int loaded = 0;
  for (const auto& entry : fs::directory_iterator(presets)) {
    std::ifstream in(entry.path());
    const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    const std::string path =
        dir.write(entry.path().filename().string(), "base_config: " + kBase + "\n" + text);
    EXPECT_EQ(load_error(path, {}), "") << entry.path();
    ++loaded;
  }
  EXPECT_EQ(loaded, 13);
  // The sharding rules are read and checked, not ignored.
  TempDir rules;
  const Config c = load_config(
      rules.write("rules.yml", "base_config: " + kBase +
                                   "\nlogical_axis_rules: [['norm', 'fsdp'], [embed, [fsdp, "
                                   "tensor]], [heads, null]]\n"),
      {}, 1);
  EXPECT_EQ(format_value(c, "logical_axis_rules"),
            "[[norm, [fsdp]], [embed, [fsdp, tensor]], [heads, []]]");
  EXPECT_NE(load_error(kBase, {"logical_axis_rules=[[norm]]"}).find("[logical axis, mesh axes]"),
            std::string::npos);
  EXPECT_EQ(load_config(kBase, {"logical_axis_rules=[[norm, fsdp]]"}, 1).logical_axis_rules.size(),
            1u);
}

TEST(Config, MaxTextTpuKeysAreAcceptedAndChecked) {
  const Config c =
      load_config(kBase,
                  {"scan_layers=False", "attention=cudnn_flash_te", "model_call_mode=inference",
                   "compute_axis_order=0,2,1,3", "ar_cache_axis_order=0,2,1,3", "sa_block_q=2048",
                   "sa_block_kv_dkv_compute=256", "ici_autoregressive_parallelism=1"},
                  1);
  EXPECT_FALSE(c.scan_layers);
  EXPECT_EQ(c.sa_block_q, 2048);
  EXPECT_EQ(c.ar_cache_axis_order, "0,2,1,3");
  const Config defaults = load_config(kBase, {}, 1);
  EXPECT_EQ(defaults.compute_axis_order, "0,1,2,3");  // MaxText's defaults
  EXPECT_EQ(defaults.ar_cache_axis_order, "1,2,0,3");
  EXPECT_NE(load_error(kBase, {"ar_cache_axis_order=0,1,1,3"}).find("permutation of 0,1,2,3"),
            std::string::npos);
  // Seven characters holding 0-3 once each are not enough: the commas sit between the digits.
  for (const char* misplaced : {"ar_cache_axis_order=0123,,,", "ar_cache_axis_order=0,12,,3"}) {
    EXPECT_NE(load_error(kBase, {misplaced}).find("permutation of 0,1,2,3"), std::string::npos)
        << misplaced;
  }
  EXPECT_NE(load_error(kBase, {"ar_cache_axis_order=0,1,2"}).find("permutation of 0,1,2,3"),
            std::string::npos);
  EXPECT_NE(load_error(kBase, {"compute_axis_order=1,0,2,3"}).find("use one of: 0,1,2,3, 0,2,1,3"),
            std::string::npos);
  EXPECT_NE(load_error(kBase, {"sa_block_kv_dq=0"}).find("'sa_block_kv_dq' = 0 must be positive"),
            std::string::npos);
  EXPECT_NE(load_error(kBase, {"model_call_mode=train"}).find("use one of"), std::string::npos);
  const std::string ar = load_error(kBase, {"ici_autoregressive_parallelism=2"});
  EXPECT_NE(ar.find("ici_autoregressive_parallelism = 2: MaxText's autoregressive axis shards"),
            std::string::npos)
      << ar;
  EXPECT_NE(ar.find("ici_context_autoregressive_parallelism"), std::string::npos) << ar;
}

TEST(Config, StepsMinusOneTakesTheSchedule) {
  const Config c = load_config(kBase, {"steps=-1", "learning_rate_schedule_steps=30"}, 1);
  EXPECT_EQ(c.steps, 30);
  EXPECT_NE(load_error(kBase, {"steps=-1"}).find("both -1"), std::string::npos);
}

TEST(Config, ModelPresetsLoadTheirDimensions) {
  const Config c = load_config(kBase, {"model_name=llama3.1-70b"}, 1);
  EXPECT_EQ(c.derived.emb_dim, 8192);
  EXPECT_EQ(c.derived.num_query_heads, 64);
  EXPECT_EQ(c.derived.num_kv_heads, 8);
  EXPECT_EQ(c.derived.mlp_dim, 28672);
  EXPECT_EQ(c.derived.num_decoder_layers, 80);
  EXPECT_EQ(c.vocab_size, 128256);
  EXPECT_DOUBLE_EQ(c.rope_max_timescale, 500000.0);
  EXPECT_EQ(c.rope_type, "llama3.1");
  const Config mixtral = load_config(kBase, {"model_name=mixtral-8x22b"}, 1);
  EXPECT_EQ(mixtral.num_experts, 8);
  EXPECT_EQ(mixtral.num_experts_per_tok, 2);
  EXPECT_EQ(mixtral.vocab_size, 32768);
  const std::string unknown = load_error(kBase, {"model_name=llama9"});
  EXPECT_NE(unknown.find("known models: default,"), std::string::npos) << unknown;
  EXPECT_NE(unknown.find("llama2-7b"), std::string::npos) << unknown;
}

TEST(Config, EveryShippedModelLoads) {
  int count = 0;
  for (const auto& entry :
       fs::directory_iterator(std::string(MAXCTX_SOURCE_DIR) + "/configs/models")) {
    const std::string name = entry.path().stem().string();
    EXPECT_EQ(load_error(kBase, {"model_name=" + name}), "") << name;
    EXPECT_EQ(load_error(kInference, {"model_name=" + name}), "") << name;
    ++count;
  }
  for (const char* name : {"llama2-7b", "llama2-70b", "llama3-8b", "llama3.1-8b", "llama3.1-70b",
                           "llama3.1-405b", "mistral-7b", "mixtral-8x7b", "mixtral-8x22b"}) {
    EXPECT_TRUE(fs::exists(std::string(MAXCTX_SOURCE_DIR) + "/configs/models/" + name + ".yml"))
        << name;
  }
  EXPECT_GE(count, 12);
}

TEST(Config, ModelKeysNeedOverrideModelConfig) {
  const std::string error = load_error(kBase, {"model_name=llama2-7b", "base_emb_dim=64"});
  EXPECT_NE(error.find("override_model_config=true"), std::string::npos) << error;
  const Config c = load_config(
      kBase, {"model_name=llama2-7b", "base_emb_dim=64", "override_model_config=true"}, 1);
  EXPECT_EQ(c.derived.emb_dim, 64);
  // Keys the model file does not set are free to override.
  EXPECT_EQ(load_config(kBase, {"model_name=llama2-7b", "steps=3"}, 1).steps, 3);
}

TEST(Config, GlobalParameterScaleSplitsLikeMaxText) {
  const Config c = load_config(kBase, {"global_parameter_scale=8"}, 1);  // 2^3: one of each
  EXPECT_EQ(c.derived.emb_dim, 4096);
  EXPECT_EQ(c.derived.num_query_heads, 32);
  EXPECT_EQ(c.derived.mlp_dim, 14336);
  EXPECT_EQ(c.derived.num_decoder_layers, 32);
  const Config two = load_config(kBase, {"global_parameter_scale=2"}, 1);  // heads and mlp
  EXPECT_EQ(two.derived.emb_dim, 2048);
  EXPECT_EQ(two.derived.num_query_heads, 32);
  EXPECT_EQ(two.derived.num_decoder_layers, 16);
}

// Issue #21, defect 6: every derived size is bounded before it is computed, so a huge value is
// one line naming the key rather than an overflow, minutes of work or a zero-width model.
TEST(Config, HugeSizesAreRefusedBeforeTheyOverflow) {
  const auto expect = [](const std::vector<std::string>& overrides, const std::string& part) {
    const std::string error = load_error(kBase, overrides);
    EXPECT_NE(error.find(part), std::string::npos) << "overrides " << overrides[0] << ": " << error;
  };
  // 2^62: the shift alone would be undefined; 2^61 scales the layers past the bound.
  expect({"global_parameter_scale=4611686018427387904"}, "global_parameter_scale");
  expect({"global_parameter_scale=2305843009213693952"}, "more than maxctx accepts");
  expect({"base_num_decoder_layers=100000000"}, "num_decoder_layers = 100000000 x 2^0");
  expect({"base_emb_dim=8589934592"}, "emb_dim = 8589934592");  // 2^33
  expect({"base_mlp_dim=8589934592"}, "mlp_dim");
  expect({"base_num_query_heads=8589934592", "base_num_kv_heads=8589934592"}, "num_query_heads");
  expect({"head_dim=8589934592"}, "'head_dim' = 8589934592 is more than");
  expect({"vocab_size=1099511627776"}, "'vocab_size' = 1099511627776 is more than");
  expect({"max_target_length=4611686018427387904"}, "'max_target_length'");
  expect({"max_prefill_predict_length=8589934592"}, "'max_prefill_predict_length'");
  expect({"per_device_batch_size=1e300"}, "sequences per step");
  expect({"attention_type=local_sliding", "sliding_window_size=4294967298"},
         "'sliding_window_size' = 4294967298");
  expect({"collective_timeout_seconds=-1"}, "collective_timeout_seconds must be >= 0");
  expect({"max_num_checkpoints_to_keep=-2"}, "max_num_checkpoints_to_keep must be >= 0");
  // The bounds are far from real models: Llama 3.1 405B's sizes load.
  EXPECT_EQ(load_error(kBase, {"base_emb_dim=16384", "base_mlp_dim=53248", "vocab_size=128256",
                               "base_num_decoder_layers=126", "base_num_query_heads=128",
                               "base_num_kv_heads=8", "max_target_length=131072"}),
            "");
}

TEST(Config, GlobalBatchAndFractionalPerDeviceBatch) {
  EXPECT_EQ(
      load_config(kBase, {"per_device_batch_size=0.5"}, 4).derived.global_batch_size_to_train_on,
      2);
  const std::string partial = load_error(kBase, {"per_device_batch_size=0.3"}, 2);
  EXPECT_NE(partial.find("whole number"), std::string::npos) << partial;
  const Config fractional = load_config(kBase, {"per_device_batch_size=0.5"}, 2);
  EXPECT_NO_THROW(validate_batch(fractional, 2));
  try {
    validate_batch(fractional, 1);
    FAIL() << "fractional batch without context parallelism";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("context"), std::string::npos);
  }
  EXPECT_NO_THROW(validate_batch(load_config(kBase, {"per_device_batch_size=2"}, 2), 1));
}

TEST(Config, EnvironmentVariablesOverrideFilesAndConflictWithTheCommandLine) {
  ::setenv("M_MAX_TARGET_LENGTH", "640", 1);
  EXPECT_EQ(load_config(kBase, {}, 1).max_target_length, 640);
  EXPECT_NE(load_error(kBase, {"max_target_length=8"}).find("$M_MAX_TARGET_LENGTH"),
            std::string::npos);
  ::unsetenv("M_MAX_TARGET_LENGTH");
}

TEST(Config, InferenceInheritsBase) {
  const Config c = load_config(kInference, {}, 2);
  EXPECT_EQ(c.ici_context_autoregressive_parallelism, -1);
  EXPECT_EQ(c.ici_fsdp_parallelism, 1);
  EXPECT_EQ(c.context_parallel_strategy, "all_gather");  // from base.yml
  EXPECT_EQ(c.derived.global_batch_size_to_train_on, 2);
  EXPECT_EQ(c.derived.ici_parallelism[3], -1);
}

// The derived degree arrays are built from the one axis list (core/mesh_axes.h): each axis's
// slot holds its own ici_/dcn_<axis>_parallelism key, in the mesh's axis order.
TEST(Config, MeshDegreesFollowTheAxisList) {
  std::vector<std::string> keys;
  for (Axis axis : kAllAxes) {
    const int64_t value = 10 + static_cast<int64_t>(axis_index(axis));
    keys.push_back(fmt::format("ici_{}_parallelism={}", axis_name(axis), value));
    keys.push_back(fmt::format("dcn_{}_parallelism={}", axis_name(axis), value + 10));
  }
  const Config c = load_config(kBase, keys, 1);
  for (Axis axis : kAllAxes) {
    const int64_t value = 10 + static_cast<int64_t>(axis_index(axis));
    EXPECT_EQ(c.derived.ici_parallelism[axis_index(axis)], value) << axis_name(axis);
    EXPECT_EQ(c.derived.dcn_parallelism[axis_index(axis)], value + 10) << axis_name(axis);
  }
}

TEST(Config, DocsMatchTheDeclarationList) {
  std::ifstream in(std::string(MAXCTX_SOURCE_DIR) + "/docs/config.md");
  ASSERT_TRUE(in) << "docs/config.md is missing; run `make docs`";
  std::stringstream text;
  text << in.rdbuf();
  EXPECT_EQ(text.str(), generate_config_doc()) << "docs/config.md is stale; run `make docs`";
  for (const KeyInfo& info : all_keys()) {
    EXPECT_NE(text.str().find(std::string("`") + info.name + "`"), std::string::npos) << info.name;
    EXPECT_GT(std::string(info.help).size(), 3u) << info.name << " has no help text";
  }
}

TEST(Config, FormatPrintsEveryKey) {
  const std::string text = format_config(load_config(kBase, {"run_name=x"}, 1));
  EXPECT_NE(text.find("Config param run_name: x\n"), std::string::npos);
  EXPECT_NE(text.find("Config param mlp_activations: [silu, linear]\n"), std::string::npos);
  EXPECT_NE(text.find("Config derived global_batch_size_to_train_on: 12\n"), std::string::npos);
}

}  // namespace
}  // namespace maxctx

// Tokenizer conformance: maxctx's ids for every text of the committed corpus
// (tests/fixtures/tokenizer_conformance/corpus.json: scripts, NFC/NFD pairs, emoji sequences,
// whitespace runs, code, 300-character runs, special tokens as text) equal the reference
// implementation's (goldens/<name>.json, written by tools/reference/tokenizer_conformance.py:
// Hugging Face tokenizers for tokenizer.json, tiktoken for rank files, sentencepiece for .model
// files), and decode(encode(x)) = x wherever the reference round-trips.
// Our own tokenizer files (committed) always run; the maxtext wheel's assets run when
// tools/reference/fetch_assets.sh has put them in $MAXCTX_ASSETS (default
// ~/.cache/maxctx/assets), and skip saying so otherwise.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "maxctx/tokenizer/tokenizer.h"

namespace maxctx::tokenizer {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

const fs::path kFixtures = fs::path(MAXCTX_TEST_FIXTURES) / "tokenizer_conformance";

json read_json(const fs::path& path) {
  std::ifstream in(path);
  return json::parse(in);
}

fs::path assets_dir() {
  if (const char* dir = std::getenv("MAXCTX_ASSETS")) return dir;
  const char* home = std::getenv("HOME");
  return fs::path(home == nullptr ? "/nonexistent" : home) / ".cache/maxctx/assets";
}

class Conformance : public ::testing::TestWithParam<std::string> {};

TEST_P(Conformance, IdsEqualTheReferenceImplementations) {
  const json golden = read_json(kFixtures / "goldens" / (GetParam() + ".json"));
  const std::string source = golden.at("tokenizer");
  const bool fetched = source.rfind("asset:", 0) == 0;
  const fs::path path = fetched ? assets_dir() / source.substr(6) : kFixtures / source.substr(8);
  if (fetched && !fs::exists(path)) {
    GTEST_SKIP() << path << " is not fetched (tools/reference/fetch_assets.sh puts the maxtext "
                 << "wheel's tokenizers there)";
  }
  const auto tok = load_tokenizer(path.string());
  EXPECT_EQ(tok->vocab_size(), golden.at("vocab_size").get<int64_t>());
  const std::vector<std::string> texts =
      read_json(kFixtures / "corpus.json").at("texts").get<std::vector<std::string>>();
  const auto& ids = golden.at("ids");
  const auto& round_trip = golden.at("round_trip");
  ASSERT_EQ(ids.size(), texts.size());
  int equal = 0;
  for (size_t i = 0; i < texts.size(); ++i) {
    const std::vector<int32_t> expected = ids[i].get<std::vector<int32_t>>();
    const std::vector<int32_t> got = tok->encode(texts[i], /*add_bos=*/false);
    EXPECT_EQ(got, expected) << golden.at("oracle").get<std::string>() << ", text " << i << ": "
                             << json(texts[i]).dump().substr(0, 120);
    equal += got == expected;
    if (round_trip[i].get<bool>()) {
      EXPECT_EQ(tok->decode(got), texts[i]) << "text " << i;
    }
  }
  EXPECT_EQ(equal, static_cast<int>(texts.size())) << "texts tokenized as the reference does";
}

INSTANTIATE_TEST_SUITE_P(Own, Conformance,
                         ::testing::Values("gpt2_style", "llama3_style", "digits_missing_bytes",
                                           "qwen_nfc", "own_tiktoken"));
INSTANTIATE_TEST_SUITE_P(MaxTextAssets, Conformance,
                         ::testing::Values("maxtext_qwen3", "maxtext_llama3_tiktoken",
                                           "maxtext_mistral_v1", "maxtext_mistral_v3",
                                           "maxtext_llama2", "maxtext_gemma", "maxtext_gemma3"));

}  // namespace
}  // namespace maxctx::tokenizer

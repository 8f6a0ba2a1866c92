// Tokenizer conformance: maxctx's ids for every text of the committed corpus
// (tests/fixtures/tokenizer_conformance/corpus.json: scripts, NFC/NFD pairs, emoji sequences,
// whitespace runs, code, 300-character runs, special tokens as text) equal the reference
// implementation's (goldens/<name>.json, written by tools/reference/tokenizer_conformance.py:
// Hugging Face tokenizers for tokenizer.json, tiktoken for rank files, sentencepiece for .model
// files), and decode(encode(x)) = x wherever the reference round-trips.
// Our own tokenizer files (committed) always run; the maxtext wheel's assets run when
// tools/reference/fetch_assets.sh has put them in $MAXCTX_ASSETS (default
// ~/.cache/maxctx/assets), and skip saying so otherwise.
// With the same files, byte-level BPE's fast algorithms (heap merges, the sorted added-token
// matcher) against the plain ones (encode_reference) on adversarial text: long runs of one
// character (one pre-token each), random bytes, random text over letters that merge, the corpus,
// added tokens over and over. Equality only: the time bounds (issue #34 N6) are
// bench/tokenizer's, since a timed unit test is flaky on a shared machine.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "maxctx/tokenizer/bpe.h"
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

// The golden's tokenizer, loaded once for both tests (the large ones take a second); null when
// it is a fetched asset that is absent.
const Tokenizer* golden_tokenizer(const json& golden) {
  static std::map<std::string, std::unique_ptr<Tokenizer>> loaded;
  const std::string source = golden.at("tokenizer");
  const bool fetched = source.rfind("asset:", 0) == 0;
  const fs::path path = fetched ? assets_dir() / source.substr(6) : kFixtures / source.substr(8);
  if (fetched && !fs::exists(path)) return nullptr;
  auto& tokenizer = loaded[path.string()];
  if (tokenizer == nullptr) tokenizer = load_tokenizer(path.string());
  return tokenizer.get();
}

std::string repeat(std::string_view unit, size_t count) {
  std::string text;
  for (size_t i = 0; i < count; ++i) text += unit;
  return text;
}

// Texts about 2,000 bytes long (the corpus 4,700): enough for a long pre-token to take many
// rounds of merges, short enough for the plain algorithms' quadratic time.
std::vector<std::string> adversarial_texts() {
  std::mt19937 rng(34);
  std::string random_bytes(2000, '\0');
  for (char& c : random_bytes) c = static_cast<char>(rng() & 0xFF);
  std::string few_letters;
  for (int i = 0; i < 2000; ++i) few_letters += "aeht n"[rng() % 6];
  std::string corpus;
  const json file = read_json(kFixtures / "corpus.json");  // alive through the loop
  for (const json& text : file.at("texts")) corpus += text.get<std::string>();
  return {repeat("a", 2000),
          repeat(" ", 2000),
          repeat("7", 2000),
          repeat("\n", 2000),
          repeat("é", 1000),
          repeat("ab", 1000),
          repeat(" \n", 1000),
          random_bytes,
          few_letters,
          corpus,
          repeat("<|im_start|", 150) + "<|im_end|>"};
}

class Conformance : public ::testing::TestWithParam<std::string> {};

TEST_P(Conformance, IdsEqualTheReferenceImplementations) {
  const json golden = read_json(kFixtures / "goldens" / (GetParam() + ".json"));
  const Tokenizer* tok = golden_tokenizer(golden);
  if (tok == nullptr) {
    GTEST_SKIP() << golden.at("tokenizer") << " is not fetched (tools/reference/fetch_assets.sh "
                 << "puts the maxtext wheel's tokenizers in " << assets_dir() << ")";
  }
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

TEST_P(Conformance, FastAlgorithmsEqualThePlainOnes) {
  const json golden = read_json(kFixtures / "goldens" / (GetParam() + ".json"));
  const Tokenizer* tok = golden_tokenizer(golden);
  if (tok == nullptr) GTEST_SKIP() << golden.at("tokenizer") << " is not fetched";
  const auto* bpe = dynamic_cast<const ByteLevelBpe*>(tok);
  if (bpe == nullptr) GTEST_SKIP() << "a SentencePiece model: libsentencepiece's algorithms";
  for (const std::string& text : adversarial_texts()) {
    const std::string shown =
        json(text.substr(0, 24)).dump(-1, ' ', false, json::error_handler_t::replace);
    EXPECT_EQ(bpe->encode(text, false), bpe->encode_reference(text, false)) << shown;
    // The text as one pre-token: merges across what the split would have cut.
    const std::string_view head = std::string_view(text).substr(0, 2000);
    EXPECT_EQ(bpe->encode_pretoken(head), bpe->encode_pretoken_reference(head)) << shown;
  }
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

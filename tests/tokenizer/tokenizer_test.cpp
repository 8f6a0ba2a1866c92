// load_tokenizer and the SentencePiece tokenizer on the fixture model (tests/fixtures/tokenizer,
// trained by tools/reference/make_tokenizer_fixture.sh on a snapshot of the project's docs):
// the ids equal Debian's spm_encode, text round-trips exactly (the training text, and text the
// model never saw through byte fallback), BOS/EOS as Llama, and load_tokenizer picks the format
// by content with clear errors.
#include "maxctx/tokenizer/tokenizer.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "io/temp_dir.h"
#include "maxctx/core/check.h"
#include "maxctx/tokenizer/bpe.h"
#include "maxctx/tokenizer/bpe_unicode.h"

namespace maxctx::tokenizer {
namespace {

using io::TempDir;

const std::string kFixtures = std::string(MAXCTX_TEST_FIXTURES) + "/tokenizer";

std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

std::vector<std::string> lines_of(const std::string& path) {
  std::ifstream in(path);
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

TEST(SentencePiece, FixtureModel) {
  const auto tok = load_tokenizer(kFixtures + "/docs_spm.model");
  EXPECT_EQ(tok->kind(), "sentencepiece");
  EXPECT_EQ(tok->vocab_size(), 1000);
  EXPECT_EQ(tok->bos_id(), 1);
  EXPECT_EQ(tok->eos_id(), 2);
}

TEST(SentencePiece, IdsEqualSpmEncode) {
  const auto tok = load_tokenizer(kFixtures + "/docs_spm.model");
  const std::vector<std::string> sentences = lines_of(kFixtures + "/sentences.txt");
  const std::vector<std::string> expected = lines_of(kFixtures + "/sentences_ids.txt");
  ASSERT_EQ(sentences.size(), expected.size());
  ASSERT_GE(sentences.size(), 5u);
  for (size_t i = 0; i < sentences.size(); ++i) {
    std::vector<int32_t> want;
    std::istringstream ids(expected[i]);
    for (int32_t id; ids >> id;) want.push_back(id);
    EXPECT_EQ(tok->encode(sentences[i], false), want) << sentences[i];
    // Byte fallback and identity normalisation: even unseen scripts and emoji round-trip.
    EXPECT_EQ(tok->decode(want), sentences[i]);
  }
}

TEST(SentencePiece, CorpusRoundTrip) {
  const auto tok = load_tokenizer(kFixtures + "/docs_spm.model");
  const std::string corpus = read_text(kFixtures + "/corpus.txt");
  ASSERT_GT(corpus.size(), 10000u);
  const std::vector<int32_t> ids = tok->encode(corpus, false);
  EXPECT_EQ(tok->decode(ids), corpus);
  // A model trained on this text compresses it: well under one token per 2 bytes.
  EXPECT_LT(ids.size() * 2, corpus.size());
  for (const int32_t id : ids) {
    ASSERT_GE(id, 3);  // never unk (byte fallback), BOS or EOS
    ASSERT_LT(id, tok->vocab_size());
  }
}

TEST(SentencePiece, BosAndEosAsLlama) {
  const auto tok = load_tokenizer(kFixtures + "/docs_spm.model");
  const std::string text = "Context parallelism shards the sequence.";
  const std::vector<int32_t> plain = tok->encode(text, false);
  std::vector<int32_t> with_bos = tok->encode(text, true);
  ASSERT_EQ(with_bos.size(), plain.size() + 1);
  EXPECT_EQ(with_bos.front(), tok->bos_id());
  EXPECT_EQ(std::vector<int32_t>(with_bos.begin() + 1, with_bos.end()), plain);
  EXPECT_NE(plain.back(), tok->eos_id());  // encode never appends EOS
  with_bos.push_back(tok->eos_id());
  EXPECT_EQ(tok->decode(with_bos), text);  // control pieces decode to nothing
  EXPECT_THROW(tok->decode(std::vector<int32_t>{1000}), Error);
}

TEST(LoadTokenizer, ChoosesByContent) {
  TempDir dir;
  // A directory with a SentencePiece tokenizer.model.
  std::filesystem::copy_file(kFixtures + "/docs_spm.model", dir.path() / "tokenizer.model");
  EXPECT_EQ(load_tokenizer(dir.path().string())->kind(), "sentencepiece");

  // GPT-2's pair, spelled by the byte map: 256 byte tokens, one merge, <|endoftext|>.
  TempDir gpt2;
  nlohmann::json encoder = nlohmann::json::object();
  for (int b = 0; b < 256; ++b) {
    std::string spelled;
    unicode::append_utf8(byte_to_unicode()[b], spelled);
    encoder[spelled] = b;
  }
  encoder["ab"] = 256;
  encoder["<|endoftext|>"] = 257;
  std::ofstream(gpt2.path() / "encoder.json") << encoder.dump();
  std::ofstream(gpt2.path() / "vocab.bpe") << "#version: 0.2\na b\n";
  const auto pair = load_tokenizer((gpt2.path() / "encoder.json").string());
  EXPECT_EQ(pair->kind(), "byte-level BPE");
  EXPECT_EQ(pair->bos_id(), 257);
  EXPECT_EQ(pair->encode("abc", true), (std::vector<int32_t>{257, 256, 'c'}));
  EXPECT_EQ(load_tokenizer(gpt2.path().string())->vocab_size(), 258);

  const auto expect_error = [](const std::string& path, const std::string& fragment) {
    try {
      load_tokenizer(path);
      ADD_FAILURE() << "expected an error containing '" << fragment << "'";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos) << e.what();
    }
  };
  expect_error("", "tokenizer_path is empty");
  expect_error((dir.path() / "absent.model").string(), "no such file");
  // A tiktoken rank file loads with MaxText's Llama 3 specials after its ranks; a bad line is
  // refused by number.
  std::ofstream(dir.path() / "tiktoken.model") << "IQ== 0\nIg== 1\n";
  const auto tiktoken = load_tokenizer((dir.path() / "tiktoken.model").string());
  EXPECT_EQ(tiktoken->encode("!\"<|eot_id|>", true), (std::vector<int32_t>{2, 0, 1, 11}));
  EXPECT_EQ(tiktoken->eos_id(), 3);
  EXPECT_EQ(tiktoken->vocab_size(), 2 + 256);
  // MaxText's relative asset names resolve from $MAXCTX_ASSETS (the wheel's tokenizers/ layout);
  // an absent one says how to get it.
  std::filesystem::create_directories(dir.path() / "tokenizers");
  std::filesystem::copy_file(dir.path() / "tiktoken.model",
                             dir.path() / "tokenizers" / "tokenizer_test.tiktoken");
  const char* outer = std::getenv("MAXCTX_ASSETS");
  const std::string saved = outer == nullptr ? "" : outer;
  ::setenv("MAXCTX_ASSETS", dir.path().c_str(), 1);
  EXPECT_EQ(resolve_tokenizer_path("assets/tokenizer_test.tiktoken"),
            (dir.path() / "tokenizers" / "tokenizer_test.tiktoken").string());
  EXPECT_EQ(load_tokenizer("assets/tokenizer_test.tiktoken")->vocab_size(), 258);
  expect_error("assets/tokenizer.mistral-v3", "run tools/reference/fetch_assets.sh");
  if (outer == nullptr) {
    ::unsetenv("MAXCTX_ASSETS");
  } else {
    ::setenv("MAXCTX_ASSETS", saved.c_str(), 1);
  }
  std::ofstream(dir.path() / "bad.tiktoken") << "IQ== 0\nI@== 1\n";
  expect_error((dir.path() / "bad.tiktoken").string(), "bad.tiktoken:2: a tiktoken line is");
  std::ofstream(dir.path() / "garbage.model") << "not a model at all";
  expect_error((dir.path() / "garbage.model").string(), "not a SentencePiece model");
  std::ofstream(dir.path() / "other.json") << R"({"a": "b"})";
  expect_error((dir.path() / "other.json").string(), "tokenizer.json");
  // A model proto whose pieces libsentencepiece's trie builder throws on, instead of returning
  // a status (found by fuzz_tokenizer; it ended in std::terminate).
  const std::string untrieable(
      "\x0a\x0e\x0a\x05\x28\x75\x6e\x6b\x3e\x15\x00\x00\x00\x00\x18\x02\x0a\x0c\x0a\x03\x3c\x73\x3e"
      "\x15\x00\x00\x00\x00\x18\x03\x0a\x0d\x0a\x04\x00\x18\x03\x0a\x0d\x0a\x00\x00\x00\x18\x58\x48"
      "\x58\x58\x58",
      49);
  std::ofstream(dir.path() / "untrieable.model", std::ios::binary) << untrieable;
  expect_error((dir.path() / "untrieable.model").string(), "not a valid SentencePiece model");
}

}  // namespace
}  // namespace maxctx::tokenizer

// dataset_type=hf's text pipeline (train/text_data.h): file lists and globs, streaming
// tokenization into a token file (each document BOS + ids + EOS, exactly the tokenizer's ids),
// JSON Lines and text giving the same file, the cache name following the inputs, and the
// one-line errors naming file and line.
#include "maxctx/train/text_data.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "maxctx/core/check.h"
#include "maxctx/tokenizer/tokenizer.h"
#include "maxctx/train/token_file.h"

namespace maxctx {
namespace {

namespace fs = std::filesystem;

const std::string kCorpus = std::string(MAXCTX_TEST_FIXTURES) + "/text_corpus";
const std::string kTokenizer = std::string(MAXCTX_TEST_FIXTURES) + "/tokenizer/docs_spm.model";

class TextDataTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("maxctx_text_" + std::to_string(::getpid()));
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string write(const std::string& name, const std::string& text) {
    const fs::path p = dir_ / name;
    std::ofstream(p) << text;
    return p.string();
  }
  TextCorpus corpus(std::vector<std::string> files, const std::string& format = "json") {
    TextCorpus c;
    c.format = format;
    c.files = std::move(files);
    c.tokenizer_path = kTokenizer;
    return c;
  }
  std::string error_of(const TextCorpus& c) {
    try {
      tokenize_to_token_file(c, (dir_ / "out.tokens").string());
    } catch (const Error& e) {
      EXPECT_FALSE(fs::exists(dir_ / "out.tokens"));  // nothing half-written
      return e.what();
    }
    return "";
  }
  fs::path dir_;
};

std::vector<int32_t> read_all(const std::string& path) {
  const TokenFile file(path);
  std::vector<int32_t> ids(static_cast<size_t>(file.count()));
  file.read(0, ids);
  return ids;
}

TEST_F(TextDataTest, GlobsAndListsExpandSorted) {
  const auto files = expand_data_files("hf_train_files", kCorpus + "/train_*.jsonl");
  ASSERT_EQ(files.size(), 2u);
  EXPECT_EQ(fs::path(files[0]).filename(), "train_a.jsonl");
  EXPECT_EQ(fs::path(files[1]).filename(), "train_b.jsonl");
  const auto list =
      expand_data_files("hf_train_files", kCorpus + "/eval.jsonl, " + kCorpus + "/train_a.jsonl");
  ASSERT_EQ(list.size(), 2u);
  EXPECT_EQ(fs::path(list[0]).filename(), "eval.jsonl");
  try {
    expand_data_files("hf_eval_files", kCorpus + "/nothing*.jsonl");
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("hf_eval_files: '"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("matches no file"), std::string::npos) << e.what();
  }
}

TEST_F(TextDataTest, DocumentsAreBosIdsEosInFileOrder) {
  const std::string out = (dir_ / "train.tokens").string();
  const TokenizeStats stats = tokenize_to_token_file(corpus({kCorpus + "/train_a.jsonl"}), out);
  EXPECT_EQ(stats.documents, 48);
  const auto tok = tokenizer::load_tokenizer(kTokenizer);
  std::vector<int32_t> expected;
  std::ifstream in(kCorpus + "/train_a.jsonl");
  for (std::string line; std::getline(in, line);) {
    auto ids = tok->encode(nlohmann::json::parse(line).at("text").get<std::string>(), true);
    expected.insert(expected.end(), ids.begin(), ids.end());
    expected.push_back(tok->eos_id());
  }
  EXPECT_EQ(read_all(out), expected);
  EXPECT_EQ(stats.tokens, static_cast<int64_t>(expected.size()));
  EXPECT_EQ(TokenFile(out).eos_id(), static_cast<uint32_t>(tok->eos_id()));
  // The same documents as plain text lines give the same file.
  const std::string text_out = (dir_ / "text.tokens").string();
  tokenize_to_token_file(corpus({kCorpus + "/train.txt"}, "text"), text_out);
  EXPECT_EQ(read_all(text_out), expected);
}

TEST_F(TextDataTest, CacheNameFollowsTheInputs) {
  const std::string file = write("a.jsonl", "{\"text\": \"one\"}\n");
  const TextCorpus c = corpus({file});
  const fs::path first = tokenized_cache_path(c, dir_, "train");
  EXPECT_EQ(first, tokenized_cache_path(c, dir_, "train"));
  TextCorpus other = c;
  other.add_bos = false;
  EXPECT_NE(first, tokenized_cache_path(other, dir_, "train"));
  other = c;
  other.column = "body";
  EXPECT_NE(first, tokenized_cache_path(other, dir_, "train"));
  write("a.jsonl", "{\"text\": \"one more\"}\n");  // a different size
  EXPECT_NE(first, tokenized_cache_path(c, dir_, "train"));
}

TEST_F(TextDataTest, ErrorsNameFileAndLine) {
  const std::string bad_json = write("bad.jsonl", "{\"text\": \"fine\"}\n{\"text\": oops}\n");
  std::string e = error_of(corpus({bad_json}));
  EXPECT_NE(e.find(bad_json + ":2: not a JSON value"), std::string::npos) << e;

  const std::string no_column = write("col.jsonl", "{\"text\": \"a\"}\n\n{\"body\": \"b\"}\n");
  e = error_of(corpus({no_column}));
  EXPECT_NE(e.find(no_column + ":3: no 'text' field"), std::string::npos) << e;

  const std::string not_string = write("num.jsonl", "{\"text\": 5}\n");
  e = error_of(corpus({not_string}));
  EXPECT_NE(e.find(not_string + ":1: field 'text' is a number"), std::string::npos) << e;

  const std::string blank = write("blank.jsonl", "\n  \n");
  e = error_of(corpus({blank}));
  EXPECT_NE(e.find("no documents in " + blank), std::string::npos) << e;

  e = error_of(corpus({(dir_ / "missing.jsonl").string()}));
  EXPECT_NE(e.find("missing.jsonl: cannot open"), std::string::npos) << e;

  TextCorpus no_eos = corpus({blank});
  no_eos.add_eos = false;
  e = error_of(no_eos);
  EXPECT_NE(e.find("add_eos=true"), std::string::npos) << e;
}

}  // namespace
}  // namespace maxctx

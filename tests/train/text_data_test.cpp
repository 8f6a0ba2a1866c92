// dataset_type=hf's text pipeline (train/text_data.h): file lists and globs, streaming
// tokenization into a token file (each document BOS + ids + EOS, exactly the tokenizer's ids),
// JSON Lines and text giving the same file, the cache name following the inputs, the one-line
// errors naming file and line; and first-fit packing (train/data_first_fit.h): the rows of a
// hand-traced case, every token in exactly one row, the five arrays of a row, and context shards
// equal to slices of the full rows.
#include "maxctx/train/text_data.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "maxctx/core/check.h"
#include "maxctx/tokenizer/tokenizer.h"
#include "maxctx/train/data_first_fit.h"
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

// A chat transcript's turns end with the tokenizer's EOS (SmolLM2's <|im_end|>; here the
// conformance fixture's <|endoftext|>, its EOS by name): the document stays one, as MaxText packs
// per input document, and the EOS inside it is a scored token like any other.
TEST_F(TextDataTest, AnEosInsideADocumentDoesNotSplitIt) {
  TextCorpus c =
      corpus({write("chat.jsonl",
                    "{\"text\": \"user: hi<|endoftext|>assistant: hello<|endoftext|>\"}\n"
                    "{\"text\": \"second document\"}\n")});
  c.tokenizer_path =
      std::string(MAXCTX_TEST_FIXTURES) + "/tokenizer_conformance/qwen_nfc.tokenizer.json";
  c.add_bos = false;
  const std::string out = (dir_ / "chat.tokens").string();
  const TokenizeStats stats = tokenize_to_token_file(c, out);
  EXPECT_EQ(stats.documents, 2);
  const auto tok = tokenizer::load_tokenizer(c.tokenizer_path);
  const std::vector<int32_t> first =
      tok->encode("user: hi<|endoftext|>assistant: hello<|endoftext|>", false);
  ASSERT_EQ(std::count(first.begin(), first.end(), tok->eos_id()), 2);
  const auto first_size = static_cast<int64_t>(first.size()) + 1;  // + the document's EOS
  EXPECT_EQ(TokenFile(out).document_starts(), (std::vector<int64_t>{0, first_size}));
  TokenDataOptions o;
  o.path = out;
  o.vocab_size = tok->vocab_size();
  o.seq_len = 64;
  o.eos_id = tok->eos_id();
  o.shuffle = false;
  const FirstFitSource source(o, 1);
  const Batch rows = source.read(0, 1);
  for (int64_t i = 0; i < first_size; ++i) {
    EXPECT_EQ(rows.segment_ids[i], 1) << i;
    EXPECT_EQ(rows.positions[i], i);
    EXPECT_EQ(rows.target_segment_ids[i], i + 1 < first_size ? 1 : 0) << i;
  }
  EXPECT_EQ(rows.segment_ids[first_size], 2);
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
  EXPECT_NE(e.find("missing.jsonl' cannot be opened"), std::string::npos) << e;

  TextCorpus no_eos = corpus({blank});
  no_eos.add_eos = false;
  e = error_of(no_eos);
  EXPECT_NE(e.find("add_eos=true"), std::string::npos) << e;
}

// Documents of 7, 6, 4, 9, 3 and 15 tokens (EOS last), rows of 12, two rows open at a time.
// First fit: 7 -> row a; 6 -> b; 4 -> a (11); 9 fits neither: a = [7, 4] and b = [6] close;
// 9 -> a; 3 -> a (12); 15 is cut into 12 + 3: 12 -> b, 3 fits neither: [9, 3] and [12] close;
// 3 -> a, closed at the end.
class FirstFitTest : public TextDataTest {
 protected:
  std::string write_documents(const std::vector<int>& lengths) {
    std::vector<int32_t> ids;
    for (const int length : lengths) {
      for (int i = 0; i + 1 < length; ++i)
        ids.push_back(3 + static_cast<int32_t>(ids.size() % 200));
      ids.push_back(2);
    }
    const std::string path = (dir_ / "docs.tokens").string();
    write_token_file(path, ids, 2, TokenWidth::kUInt16);
    return path;
  }
  TokenDataOptions options(const std::string& path, int64_t seq, bool shuffle = false) {
    TokenDataOptions o;
    o.path = path;
    o.vocab_size = 256;
    o.seq_len = seq;
    o.eos_id = 2;
    o.shuffle = shuffle;
    return o;
  }
};

TEST_F(FirstFitTest, RowsOfAHandTracedCase) {
  const FirstFitSource source(options(write_documents({7, 6, 4, 9, 3, 15}), 12), 2);
  // File offsets: 0, 7, 13, 17, 26, 29, 44.
  const std::vector<std::vector<TokenRange>> expected = {
      {{0, 7}, {13, 17}}, {{7, 13}}, {{17, 26}, {26, 29}}, {{29, 41}}, {{41, 44}}};
  ASSERT_EQ(source.rows_per_epoch(), 5);
  for (int64_t r = 0; r < 5; ++r) EXPECT_EQ(source.row_pieces(r), expected[r]) << r;

  // Row 3: the first 12 tokens of the 15-token document, positions 0..11, all scored (the last
  // one's target is the document's next token, past the cut).
  const Batch cut = source.read(3, 1);
  for (int64_t c = 0; c < 12; ++c) {
    EXPECT_EQ(cut.positions[c], c);
    EXPECT_EQ(cut.segment_ids[c], 1);
    EXPECT_EQ(cut.target_segment_ids[c], 1);
    EXPECT_EQ(cut.targets[c], c < 11 ? cut.tokens[c + 1] : 3 + 41);
  }
  // Row 0: two documents, positions restarting, each EOS unscored, then one padding column.
  const Batch two = source.read(0, 1);
  EXPECT_EQ(two.positions[7], 0);
  EXPECT_EQ(two.segment_ids[6], 1);
  EXPECT_EQ(two.segment_ids[7], 2);
  EXPECT_EQ(two.tokens[6], 2);
  EXPECT_EQ(two.target_segment_ids[6], 0);
  EXPECT_EQ(two.target_segment_ids[10], 0);
  EXPECT_EQ(two.segment_ids[11], 0);
  EXPECT_EQ(two.tokens[11], 0);
  EXPECT_EQ(total_weights(two), 6 + 3);
}

TEST_F(FirstFitTest, EveryTokenOnceAndContextShardsAreSlices) {
  std::vector<int> lengths;
  for (int d = 0; d < 60; ++d) lengths.push_back(2 + (d * 37) % 53);
  const std::string path = write_documents(lengths);
  const FirstFitSource source(options(path, 48, /*shuffle=*/true), 4);
  std::vector<int> seen(static_cast<size_t>(TokenFile(path).count()), 0);
  for (int64_t r = 0; r < source.rows_per_epoch(); ++r) {
    int64_t fill = 0;
    for (const TokenRange& piece : source.row_pieces(r)) {
      fill += piece.size();
      for (int64_t t = piece.begin; t < piece.end; ++t) ++seen[static_cast<size_t>(t)];
    }
    EXPECT_LE(fill, 48);
  }
  EXPECT_TRUE(std::all_of(seen.begin(), seen.end(), [](int n) { return n == 1; }));
  // The last 3 rows of the first epoch and the first 4 of the next, in its own shuffled order.
  const int64_t first = source.rows_per_epoch() - 3;
  const Batch full = source.read(first, 7);
  for (const int64_t cp : {2, 3}) {
    for (const bool balance : {true, false}) {
      for (int64_t rank = 0; rank < cp; ++rank) {
        EXPECT_EQ(source.read(first, 7, cp, rank, balance),
                  shard_batch_for_context(full, cp, rank, balance))
            << cp << " " << rank << " " << balance;
      }
    }
  }
}

}  // namespace
}  // namespace maxctx

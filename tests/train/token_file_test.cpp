// The token file format and the tokens source: round trips in both widths, packing and
// non-packing rows against hand-worked expectations, epochs and the shuffle, every error path.
#include "maxctx/train/token_file.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include "maxctx/core/check.h"
#include "maxctx/train/data_first_fit.h"
#include "maxctx/train/data_tokens.h"

namespace maxctx {
namespace {

using Ints = std::vector<int32_t>;

std::string temp_path(const std::string& name) {
  return testing::TempDir() + "maxctx_token_file_test_" + std::to_string(::getpid()) + "_" + name;
}

class TempFile {
 public:
  explicit TempFile(const std::string& name) : path_(temp_path(name)) {}
  ~TempFile() { std::remove(path_.c_str()); }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

std::string error_of(const std::function<void()>& body) {
  try {
    body();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

void patch_u32(const std::string& path, std::streamoff offset, uint32_t value) {
  std::fstream file(path, std::ios::in | std::ios::out | std::ios::binary);
  file.seekp(offset);
  file.write(reinterpret_cast<const char*>(&value), 4);
}

TEST(TokenFile, RoundTripsBothWidths) {
  const Ints small = {0, 1, 2, 65535, 7, 2, 300};
  const Ints large = {0, 128255, 2, 70000, 1, 2147483647};
  for (auto [width, tokens] :
       {std::pair{TokenWidth::kUInt16, small}, std::pair{TokenWidth::kUInt32, large}}) {
    TempFile file("round_trip.tok");
    write_token_file(file.path(), tokens, 2, width);
    const TokenFile reader(file.path());
    EXPECT_EQ(reader.count(), static_cast<int64_t>(tokens.size()));
    EXPECT_EQ(reader.eos_id(), 2u);
    EXPECT_EQ(reader.width(), width);
    Ints all(tokens.size());
    reader.read(0, all);
    EXPECT_EQ(all, tokens);
    Ints middle(3);
    reader.read(2, middle);
    EXPECT_EQ(middle, Ints(tokens.begin() + 2, tokens.begin() + 5));
    EXPECT_EQ(reader.at(1), static_cast<uint32_t>(tokens[1]));
    std::ifstream raw(file.path(), std::ios::binary | std::ios::ate);
    EXPECT_EQ(static_cast<size_t>(raw.tellg()), 32 + tokens.size() * static_cast<uint32_t>(width));
  }
}

TEST(TokenFile, EveryErrorSaysWhatIsWrong) {
  const Ints tokens = {5, 6, 2, 7, 8, 2};
  EXPECT_NE(error_of([] { TokenFile(temp_path("missing.tok")); }).find("cannot be opened"),
            std::string::npos);

  TempFile file("broken.tok");
  const auto rewrite = [&] { write_token_file(file.path(), tokens, 2, TokenWidth::kUInt16); };
  const auto open = [&] { return error_of([&] { TokenFile reader(file.path()); }); };

  rewrite();
  ::truncate(file.path().c_str(), 32 + 5 * 2);
  EXPECT_NE(open().find("truncated: 42 bytes, but the header says 6 tokens of 2 bytes = 44"),
            std::string::npos)
      << open();
  ::truncate(file.path().c_str(), 10);
  EXPECT_NE(open().find("shorter than the 32-byte header"), std::string::npos) << open();

  rewrite();
  ::truncate(file.path().c_str(), 32 + 7 * 2);
  EXPECT_NE(open().find("trailing bytes"), std::string::npos) << open();

  rewrite();
  patch_u32(file.path(), 0, 0x4b4f5447);  // "GTOK" over the magic
  EXPECT_NE(open().find("bad magic"), std::string::npos) << open();

  rewrite();
  patch_u32(file.path(), 8, 2);
  EXPECT_NE(open().find("truncated"), std::string::npos) << "version 2 needs its index";
  patch_u32(file.path(), 8, 3);
  EXPECT_NE(open().find("version 3 is not supported"), std::string::npos) << open();

  rewrite();
  patch_u32(file.path(), 12, 3);
  EXPECT_NE(open().find("3 bytes per token is not a known dtype"), std::string::npos) << open();

  EXPECT_NE(error_of([&] {
              write_token_file(file.path(), Ints{1, 70000}, 2, TokenWidth::kUInt16);
            }).find("token 70000 at index 1 does not fit"),
            std::string::npos);
  EXPECT_NE(error_of([&] {
              write_token_file(file.path(), Ints{1, -3}, 2, TokenWidth::kUInt32);
            }).find("token -3"),
            std::string::npos);
}

TEST(TokenFileSource, RejectsIdsOutsideTheVocabularyAndAWrongEos) {
  TempFile file("vocab.tok");
  write_token_file(file.path(), Ints{5, 6, 2, 99, 100, 2}, 2, TokenWidth::kUInt16);
  TokenDataOptions options;
  options.path = file.path();
  options.vocab_size = 100;
  options.seq_len = 4;
  options.eos_id = 2;
  const std::string vocab = error_of([&] { TokenFileSource source(options); });
  EXPECT_NE(vocab.find("token 100 at index 4 is >= vocab_size = 100"), std::string::npos) << vocab;
  options.vocab_size = 101;
  EXPECT_NO_THROW(TokenFileSource source(options));
  options.eos_id = 1;
  const std::string eos = error_of([&] { TokenFileSource source(options); });
  EXPECT_NE(eos.find("set eos_id=2"), std::string::npos) << eos;

  write_token_file(file.path(), Ints{}, 2, TokenWidth::kUInt16);
  options.eos_id = 2;
  EXPECT_NE(error_of([&] { TokenFileSource source(options); }).find("no tokens"),
            std::string::npos);
}

// Documents A (4, with EOS), B (3), C (11, longer than a row), D (2), E (3, no EOS at the end).
const Ints kDocuments = {10, 11, 12, 2,                              // A
                         20, 21, 2,                                  // B
                         30, 31, 32, 33, 34, 35, 36, 37, 38, 39, 2,  // C
                         40, 2,                                      // D
                         50, 51, 52};                                // E

TokenDataOptions options_for(const std::string& path, bool packing) {
  TokenDataOptions options;
  options.path = path;
  options.vocab_size = 100;
  options.seq_len = 8;
  options.packing = packing;
  options.eos_id = 2;
  options.shuffle = false;
  return options;
}

TEST(TokenFileSource, PacksDocumentsWithSegmentsPositionsAndTargets) {
  TempFile file("packed.tok");
  write_token_file(file.path(), kDocuments, 2, TokenWidth::kUInt16);
  const TokenFileSource source(options_for(file.path(), true));
  ASSERT_EQ(source.num_documents(), 5);
  ASSERT_EQ(source.rows_per_epoch(), 3);
  const Batch rows = source.read(0, 3);
  // Row 0: A and B; C does not fit in the last column, so it moves whole to row 1.
  // Row 1: C is longer than a row: its first 8 tokens; the last target (38) lies in row 2.
  // Row 2: the rest of C (positions restart), D, E; E's last token has no next token.
  EXPECT_EQ(rows.tokens, (Ints{10, 11, 12, 2,  20, 21, 2,  0,   //
                               30, 31, 32, 33, 34, 35, 36, 37,  //
                               38, 39, 2,  40, 2,  50, 51, 52}));
  EXPECT_EQ(rows.segment_ids, (Ints{1, 1, 1, 1, 2, 2, 2, 0,  //
                                    1, 1, 1, 1, 1, 1, 1, 1,  //
                                    1, 1, 1, 2, 2, 3, 3, 3}));
  EXPECT_EQ(rows.positions, (Ints{0, 1, 2, 3, 0, 1, 2, 0,  //
                                  0, 1, 2, 3, 4, 5, 6, 7,  //
                                  0, 1, 2, 0, 1, 0, 1, 2}));
  EXPECT_EQ(rows.targets, (Ints{11, 12, 2,  0,  21, 2,  0,  0,   //
                                31, 32, 33, 34, 35, 36, 37, 38,  //
                                39, 2,  0,  2,  0,  51, 52, 0}));
  EXPECT_EQ(rows.target_segment_ids, (Ints{1, 1, 1, 0, 2, 2, 0, 0,  //
                                           1, 1, 1, 1, 1, 1, 1, 1,  //
                                           1, 1, 0, 2, 0, 3, 3, 0}));
  EXPECT_EQ(total_weights(rows), 18);
  // Past the last row the next epoch starts over (shuffle off).
  EXPECT_EQ(source.read(3, 3), rows);
  EXPECT_EQ(source.row_span(2), (TokenRange{15, 23}));
}

// Version 2 files (what dataset_type=hf writes) record where each document ends: an EOS inside a
// document (a chat transcript's <|im_end|> turns; eos 2 here) neither splits it nor goes
// unscored, in both packers; the document's final token is the one unscored.
TEST(TokenFileSource, IndexedDocumentsKeepTheirOwnEos) {
  TempFile file("indexed.tok");
  {
    TokenFileWriter writer(file.path(), 2, TokenWidth::kUInt16, /*document_index=*/true);
    for (const Ints& doc : {Ints{10, 2, 11, 2, 12, 2}, Ints{20, 2, 21}, Ints{30, 2}}) {
      writer.append(doc);
      writer.end_document();
    }
    writer.finish();
  }
  const TokenFile reader(file.path());
  EXPECT_EQ(reader.document_starts(), (std::vector<int64_t>{0, 6, 9}));
  std::ifstream raw(file.path(), std::ios::binary | std::ios::ate);
  EXPECT_EQ(static_cast<size_t>(raw.tellg()), 32 + 11 * 2 + 3 * 8 + 8);

  const TokenFileSource greedy(options_for(file.path(), true));
  EXPECT_EQ(greedy.num_documents(), 3);
  const FirstFitSource first_fit(options_for(file.path(), true), 1);
  for (const DataSource* source :
       {static_cast<const DataSource*>(&greedy), static_cast<const DataSource*>(&first_fit)}) {
    const Batch rows = source->read(0, 2);
    // Row 0: the first document whole (8 columns; the second does not fit); row 1: the others.
    EXPECT_EQ(rows.tokens, (Ints{10, 2, 11, 2, 12, 2, 0, 0,  //
                                 20, 2, 21, 30, 2, 0, 0, 0}));
    EXPECT_EQ(rows.segment_ids, (Ints{1, 1, 1, 1, 1, 1, 0, 0,  //
                                      1, 1, 1, 2, 2, 0, 0, 0}));
    EXPECT_EQ(rows.positions, (Ints{0, 1, 2, 3, 4, 5, 0, 0,  //
                                    0, 1, 2, 0, 1, 0, 0, 0}));
    EXPECT_EQ(rows.targets, (Ints{2, 11, 2, 12, 2, 0, 0, 0,  //
                                  2, 21, 0, 2, 0, 0, 0, 0}));
    EXPECT_EQ(rows.target_segment_ids, (Ints{1, 1, 1, 1, 1, 0, 0, 0,  //
                                             1, 1, 0, 2, 0, 0, 0, 0}));
  }
}

// A version 2 file's index is checked: it must ascend and end at the last token.
TEST(TokenFile, ABrokenDocumentIndexIsRefused) {
  TempFile file("bad_index.tok");
  {
    TokenFileWriter writer(file.path(), 2, TokenWidth::kUInt32, /*document_index=*/true);
    writer.append(Ints{5, 6, 7});
    writer.end_document();
    writer.append(Ints{8});
    writer.end_document();
    writer.finish();
  }
  const auto patch_u64 = [&](std::streamoff offset, uint64_t value) {
    std::fstream f(file.path(), std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(offset);
    f.write(reinterpret_cast<const char*>(&value), 8);
  };
  const auto open = [&] { return error_of([&] { TokenFile reader(file.path()); }); };
  EXPECT_EQ(open(), "");
  const std::streamoff index = 32 + 4 * 4;
  patch_u64(index, 5);
  EXPECT_NE(open().find("document 0 ends at 5, not in (0, 4]"), std::string::npos) << open();
  patch_u64(index, 3);
  patch_u64(index + 8, 3);
  EXPECT_NE(open().find("document 1 ends at 3, not in (3, 4]"), std::string::npos) << open();
  patch_u64(index + 16, 1000);
  EXPECT_NE(open().find("says 1000 documents"), std::string::npos) << open();
}

TEST(TokenFileSource, WithoutPackingEachRowIsOneDocumentPrefix) {
  TempFile file("unpacked.tok");
  write_token_file(file.path(), kDocuments, 2, TokenWidth::kUInt32);
  const TokenFileSource source(options_for(file.path(), false));
  ASSERT_EQ(source.rows_per_epoch(), 5);
  const Batch rows = source.read(0, 5);
  const auto row = [&](const Ints& array, int r) {
    return Ints(array.begin() + r * 8, array.begin() + (r + 1) * 8);
  };
  EXPECT_EQ(row(rows.tokens, 0), (Ints{10, 11, 12, 2, 0, 0, 0, 0}));
  EXPECT_EQ(row(rows.segment_ids, 0), (Ints{1, 1, 1, 1, 0, 0, 0, 0}));
  EXPECT_EQ(row(rows.targets, 0), (Ints{11, 12, 2, 0, 0, 0, 0, 0}));
  EXPECT_EQ(row(rows.target_segment_ids, 0), (Ints{1, 1, 1, 0, 0, 0, 0, 0}));
  // C is truncated to its first 8 tokens; the target after the prefix is still C's next token.
  EXPECT_EQ(row(rows.tokens, 2), (Ints{30, 31, 32, 33, 34, 35, 36, 37}));
  EXPECT_EQ(row(rows.targets, 2), (Ints{31, 32, 33, 34, 35, 36, 37, 38}));
  EXPECT_EQ(row(rows.positions, 2), (Ints{0, 1, 2, 3, 4, 5, 6, 7}));
  EXPECT_EQ(row(rows.target_segment_ids, 2), (Ints{1, 1, 1, 1, 1, 1, 1, 1}));
  EXPECT_EQ(row(rows.tokens, 4), (Ints{50, 51, 52, 0, 0, 0, 0, 0}));
  EXPECT_EQ(row(rows.targets, 4), (Ints{51, 52, 0, 0, 0, 0, 0, 0}));
  EXPECT_EQ(row(rows.target_segment_ids, 4), (Ints{1, 1, 0, 0, 0, 0, 0, 0}));
  EXPECT_EQ(row(rows.positions, 4), (Ints{0, 1, 2, 0, 0, 0, 0, 0}));
}

TEST(TokenFileSource, ShuffledEpochsVisitEveryRowOnce) {
  TempFile file("shuffled.tok");
  Ints tokens;
  for (int doc = 0; doc < 50; ++doc) {
    for (int k = 0; k <= doc % 5; ++k) tokens.push_back(3 + doc);
    tokens.push_back(2);
  }
  write_token_file(file.path(), tokens, 2, TokenWidth::kUInt16);
  TokenDataOptions options = options_for(file.path(), false);
  const TokenFileSource plain(options);
  options.shuffle = true;
  options.seed = 11;
  const TokenFileSource shuffled(options);
  const int64_t rows = plain.rows_per_epoch();
  ASSERT_EQ(rows, 50);
  // Each row of this file starts with a distinct token: compare epochs as sets of first tokens.
  const auto first_tokens = [&](const TokenFileSource& source, int64_t begin) {
    const Batch batch = source.read(begin, rows);
    Ints firsts;
    for (int64_t r = 0; r < rows; ++r) firsts.push_back(batch.tokens[r * 8]);
    return firsts;
  };
  const Ints in_order = first_tokens(plain, 0);
  const Ints epoch0 = first_tokens(shuffled, 0);
  const Ints epoch1 = first_tokens(shuffled, rows);
  EXPECT_NE(epoch0, in_order);
  EXPECT_NE(epoch0, epoch1);
  Ints sorted0 = epoch0, sorted1 = epoch1;
  std::sort(sorted0.begin(), sorted0.end());
  std::sort(sorted1.begin(), sorted1.end());
  EXPECT_EQ(sorted0, in_order);
  EXPECT_EQ(sorted1, in_order);
}

}  // namespace
}  // namespace maxctx

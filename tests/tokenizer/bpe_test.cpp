// Byte-level BPE by hand: the split patterns on cases worked out from the regex semantics, the
// byte map, the merge order, ignore_merges, added tokens, BOS/EOS discovery and the loader's
// errors, on small tokenizer.json files written here. (The comparison with an outside
// implementation on real GPT-2 files is bpe_reference_test.)
#include "maxctx/tokenizer/bpe.h"

#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "io/temp_dir.h"
#include "maxctx/core/check.h"
#include "maxctx/tokenizer/bpe_unicode.h"

namespace maxctx::tokenizer {
namespace {

using io::TempDir;
using nlohmann::json;
using Pieces = std::vector<std::string>;

Pieces split(std::string_view text, SplitPattern pattern) {
  const std::vector<std::string_view> pieces = split_pretokens(text, pattern);
  return {pieces.begin(), pieces.end()};
}

std::string spelled(std::string_view bytes) {
  std::string out;
  for (const char b : bytes) unicode::append_utf8(byte_to_unicode()[static_cast<uint8_t>(b)], out);
  return out;
}

TEST(SplitPretokens, Gpt2Pattern) {
  const SplitPattern p = SplitPattern::kGpt2;
  EXPECT_EQ(split("Hello world", p), (Pieces{"Hello", " world"}));
  EXPECT_EQ(split("I'm  here", p), (Pieces{"I", "'m", " ", " here"}));
  EXPECT_EQ(split("a   b", p), (Pieces{"a", "  ", " b"}));
  EXPECT_EQ(split("end   ", p), (Pieces{"end", "   "}));
  EXPECT_EQ(split("x\n\ny", p), (Pieces{"x", "\n", "\n", "y"}));
  EXPECT_EQ(split("123abc 42", p), (Pieces{"123", "abc", " 42"}));
  EXPECT_EQ(split("don't DON'T", p), (Pieces{"don", "'t", " DON", "'", "T"}));
  EXPECT_EQ(split(" 's!?", p), (Pieces{" '", "s", "!?"}));
  EXPECT_EQ(split("caf\xC3\xA9 \xE6\x97\xA5\xE6\x9C\xAC", p),
            (Pieces{"caf\xC3\xA9", " \xE6\x97\xA5\xE6\x9C\xAC"}));
  // Invalid UTF-8 bytes are "other" characters, one per byte.
  EXPECT_EQ(split("\xFF\xFE"
                  "ab",
                  p),
            (Pieces{"\xFF\xFE", "ab"}));
  EXPECT_TRUE(split("", p).empty());
}

TEST(SplitPretokens, Llama3Pattern) {
  const SplitPattern p = SplitPattern::kLlama3;
  EXPECT_EQ(split("DON'T we'LL", p), (Pieces{"DON", "'T", " we", "'LL"}));
  EXPECT_EQ(split("1234567", p), (Pieces{"123", "456", "7"}));
  EXPECT_EQ(split("x 42", p), (Pieces{"x", " ", "42"}));
  EXPECT_EQ(split("hello\n\nworld", p), (Pieces{"hello", "\n\n", "world"}));
  EXPECT_EQ(split("a  \n  b", p), (Pieces{"a", "  \n", " ", " b"}));
  EXPECT_EQ(split("!abc ...abc", p), (Pieces{"!abc", " ...", "abc"}));
  EXPECT_EQ(split("end,\n\tfoo", p), (Pieces{"end", ",\n", "\tfoo"}));
  EXPECT_EQ(split("'sup", p), (Pieces{"'s", "up"}));
  EXPECT_EQ(split("trailing  ", p), (Pieces{"trailing", "  "}));
}

TEST(ByteToUnicode, Gpt2Map) {
  const auto& map = byte_to_unicode();
  EXPECT_EQ(map[' '], U'\u0120');   // Ġ
  EXPECT_EQ(map['\n'], U'\u010A');  // Ċ
  EXPECT_EQ(map['A'], U'A');
  EXPECT_EQ(map[0xAD], U'\u0143');  // the last of the 68 remapped bytes
  EXPECT_EQ(map[0xFF], U'\u00FF');
  for (int b = 0; b < 256; ++b) {
    const std::string bytes(1, static_cast<char>(b));
    EXPECT_EQ(unicode_to_bytes(spelled(bytes)), bytes);
  }
  EXPECT_FALSE(unicode_to_bytes("\xE2\x82\xAC").has_value());  // € is outside the map
}

// A tokenizer.json with the 256 byte tokens (ids 0..255 in byte order), a few merges and added
// tokens, in the Llama 3 layout.
json tiny_tokenizer_json() {
  json vocab = json::object();
  for (int b = 0; b < 256; ++b) vocab[spelled(std::string(1, static_cast<char>(b)))] = b;
  vocab["he"] = 256;
  vocab["ll"] = 257;
  vocab["hell"] = 258;
  vocab["hello"] = 259;
  vocab[spelled(" w")] = 260;
  vocab["lo"] = 261;  // reachable only through ignore_merges
  json root;
  root["version"] = "1.0";
  root["normalizer"] = nullptr;
  root["added_tokens"] = json::array({
      {{"id", 300}, {"content", "<|begin_of_text|>"}, {"special", true}},
      {{"id", 301}, {"content", "<|end_of_text|>"}, {"special", true}},
      {{"id", 302}, {"content", "<tool>"}, {"special", false}},
  });
  root["pre_tokenizer"] = {
      {"type", "Sequence"},
      {"pretokenizers",
       json::array(
           {{{"type", "Split"},
             {"pattern", {{"Regex", std::string(split_pattern_regex(SplitPattern::kLlama3))}}},
             {"behavior", "Isolated"},
             {"invert", false}},
            {{"type", "ByteLevel"},
             {"add_prefix_space", false},
             {"trim_offsets", true},
             {"use_regex", false}}})}};
  root["model"] = {{"type", "BPE"},
                   {"dropout", nullptr},
                   {"byte_fallback", false},
                   {"ignore_merges", false},
                   {"vocab", vocab},
                   {"merges", json::array({"h e", "l l", "he ll", "hell o", spelled(" ") + " w"})}};
  return root;
}

std::filesystem::path write_json(const std::filesystem::path& path, const json& value) {
  std::ofstream(path) << value.dump();
  return path;
}

TEST(ByteLevelBpe, MergesInRankOrder) {
  TempDir dir;
  const auto bpe = ByteLevelBpe::from_tokenizer_json(
      write_json(dir.path() / "tokenizer.json", tiny_tokenizer_json()));
  EXPECT_EQ(bpe->vocab_size(), 303);
  EXPECT_EQ(bpe->pattern(), SplitPattern::kLlama3);
  EXPECT_EQ(bpe->encode("hello", false), (std::vector<int32_t>{259}));
  EXPECT_EQ(bpe->encode(" wow", false), (std::vector<int32_t>{260, 'o', 'w'}));
  // (h, e) ranks before (l, l): "llhe" -> l l he -> ll he.
  EXPECT_EQ(bpe->encode_pretoken("llhe"), (std::vector<int32_t>{257, 256}));
  EXPECT_EQ(bpe->encode("hell", false), (std::vector<int32_t>{258}));
  // Without ignore_merges, "lo" is never formed.
  EXPECT_EQ(bpe->encode("lo", false), (std::vector<int32_t>{'l', 'o'}));
  const std::string text = "hello wow, 1234 \xF0\x9F\x99\x82\n";
  EXPECT_EQ(bpe->decode(bpe->encode(text, false)), text);
}

TEST(ByteLevelBpe, IgnoreMergesTakesWholeVocabularyWords) {
  TempDir dir;
  json root = tiny_tokenizer_json();
  root["model"]["ignore_merges"] = true;
  const auto bpe =
      ByteLevelBpe::from_tokenizer_json(write_json(dir.path() / "tokenizer.json", root));
  EXPECT_EQ(bpe->encode("lo", false), (std::vector<int32_t>{261}));
  EXPECT_EQ(bpe->encode("hello", false), (std::vector<int32_t>{259}));
  EXPECT_EQ(bpe->encode("helo", false), (std::vector<int32_t>{256, 'l', 'o'}));
}

TEST(ByteLevelBpe, AddedTokensBosAndEos) {
  TempDir dir;
  const auto bpe = ByteLevelBpe::from_tokenizer_json(
      write_json(dir.path() / "tokenizer.json", tiny_tokenizer_json()));
  EXPECT_EQ(bpe->bos_id(), 300);  // by name: no tokenizer_config.json, no template
  EXPECT_EQ(bpe->eos_id(), 301);
  const std::vector<int32_t> ids = bpe->encode("<|begin_of_text|>hi<tool>x<|end_of_text|>", true);
  EXPECT_EQ(ids, (std::vector<int32_t>{300, 300, 'h', 'i', 302, 'x', 301}));
  // Special tokens decode to nothing, ordinary added tokens to their text.
  EXPECT_EQ(bpe->decode(ids), "hi<tool>x");
  EXPECT_THROW(bpe->decode(std::vector<int32_t>{303}), Error);
  EXPECT_THROW(bpe->decode(std::vector<int32_t>{-1}), Error);
}

TEST(ByteLevelBpe, BosEosFromTokenizerConfigAndTemplate) {
  TempDir dir;
  json root = tiny_tokenizer_json();
  root["post_processor"] = {
      {"type", "TemplateProcessing"},
      {"single", json::array({{{"SpecialToken", {{"id", "<tool>"}, {"type_id", 0}}}},
                              {{"Sequence", {{"id", "A"}, {"type_id", 0}}}}})}};
  const auto from_template =
      ByteLevelBpe::from_tokenizer_json(write_json(dir.path() / "tokenizer.json", root));
  EXPECT_EQ(from_template->bos_id(), 302);
  write_json(dir.path() / "tokenizer_config.json",
             {{"bos_token", "<|end_of_text|>"}, {"eos_token", {{"content", "<tool>"}}}});
  const auto from_config = ByteLevelBpe::from_tokenizer_json(dir.path() / "tokenizer.json");
  EXPECT_EQ(from_config->bos_id(), 301);
  EXPECT_EQ(from_config->eos_id(), 302);
}

void expect_load_error(const json& root, const std::string& fragment) {
  TempDir dir;
  const auto path = write_json(dir.path() / "tokenizer.json", root);
  try {
    ByteLevelBpe::from_tokenizer_json(path);
    ADD_FAILURE() << "expected an error containing '" << fragment << "'";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos) << e.what();
  }
}

TEST(ByteLevelBpe, LoaderErrorsNameTheProblem) {
  json unknown_pattern = tiny_tokenizer_json();
  unknown_pattern["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = "\\p{N}+";
  expect_load_error(unknown_pattern, "is not implemented");
  json normalizer = tiny_tokenizer_json();
  normalizer["normalizer"] = {{"type", "NFKC"}};
  expect_load_error(normalizer, "normalizer {\"type\":\"NFKC\"} is not supported");
  json digits_after = tiny_tokenizer_json();
  digits_after["pre_tokenizer"]["pretokenizers"].push_back({{"type", "Digits"}});
  expect_load_error(digits_after, "a step after ByteLevel");
  json unknown_unk = tiny_tokenizer_json();
  unknown_unk["model"]["unk_token"] = "<unk>";
  expect_load_error(unknown_unk, "the unk_token \"<unk>\" is not in the vocabulary");
  json bad_merge = tiny_tokenizer_json();
  bad_merge["model"]["merges"].push_back("he zz");
  expect_load_error(bad_merge, "\"zz\", which is not in the vocabulary");
  json not_byte_level = tiny_tokenizer_json();
  not_byte_level["model"]["vocab"]["\xE2\x96\x81the"] = 290;  // ▁the: SentencePiece spelling
  expect_load_error(not_byte_level, "not in the byte-level alphabet");
  json duplicate = tiny_tokenizer_json();
  duplicate["model"]["vocab"]["xyz"] = 5;
  expect_load_error(duplicate, "id 5 is given to two tokens");
  json lstrip = tiny_tokenizer_json();
  lstrip["added_tokens"][2]["lstrip"] = true;
  expect_load_error(lstrip, "lstrip = true");
}

// A byte whose single-byte token the vocabulary lacks (SmolLM2 lacks 21) is dropped before the
// merges, so its neighbours may merge across it; with the model's unk_token it becomes that
// token (fuse_unk: one for a run), as tokenizers' BPE does.
TEST(ByteLevelBpe, BytesWithoutATokenAreDroppedOrUnknown) {
  TempDir dir;
  json root = tiny_tokenizer_json();
  root["model"]["vocab"].erase(spelled("\x04"));
  root["model"]["vocab"].erase(spelled("\x05"));
  const auto dropped =
      ByteLevelBpe::from_tokenizer_json(write_json(dir.path() / "tokenizer.json", root));
  // "\x04hello" is one pre-token (Llama 3's optional leading character): without its first
  // byte it is "hello", one token.
  EXPECT_EQ(dropped->encode("\x04hello", false), (std::vector<int32_t>{259}));
  EXPECT_EQ(dropped->encode("\x04", false), (std::vector<int32_t>{}));
  root["model"]["vocab"]["<unk>"] = 262;
  root["model"]["unk_token"] = "<unk>";
  const auto unknown =
      ByteLevelBpe::from_tokenizer_json(write_json(dir.path() / "tokenizer.json", root));
  EXPECT_EQ(unknown->encode("a\x04\x05"
                            "b",
                            false),
            (std::vector<int32_t>{'a', 262, 262, 'b'}));
  root["model"]["fuse_unk"] = true;
  const auto fused =
      ByteLevelBpe::from_tokenizer_json(write_json(dir.path() / "tokenizer.json", root));
  EXPECT_EQ(fused->encode("a\x04\x05"
                          "b\x04",
                          false),
            (std::vector<int32_t>{'a', 262, 'b', 262}));
}

// Digits before ByteLevel (SmolLM2, StarCoder2): every number character its own pre-token, the
// GPT-2 pattern inside the rest; Digits without individual_digits cuts out runs.
TEST(SplitDigits, IndividualAndRuns) {
  const auto pieces = [](std::string_view text, DigitSplit d) {
    const std::vector<std::string_view> p = split_digits(text, d);
    return Pieces(p.begin(), p.end());
  };
  EXPECT_EQ(pieces("ab 123x", DigitSplit::kIndividual), (Pieces{"ab ", "1", "2", "3", "x"}));
  EXPECT_EQ(pieces("ab 123x", DigitSplit::kRuns), (Pieces{"ab ", "123", "x"}));
  // Arabic-Indic three (Nd) and one half (No) are numbers too.
  EXPECT_EQ(pieces("\xD9\xA3\xC2\xBD", DigitSplit::kIndividual), (Pieces{"\xD9\xA3", "\xC2\xBD"}));
  EXPECT_EQ(pieces("", DigitSplit::kIndividual), Pieces{});
  TempDir dir;
  json root = tiny_tokenizer_json();
  root["pre_tokenizer"] = {
      {"type", "Sequence"},
      {"pretokenizers",
       json::array({{{"type", "Digits"}, {"individual_digits", true}},
                    {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", true}}})}};
  root["model"]["vocab"]["12"] = 263;
  root["model"]["merges"].push_back("1 2");
  const auto bpe =
      ByteLevelBpe::from_tokenizer_json(write_json(dir.path() / "tokenizer.json", root));
  EXPECT_EQ(bpe->encode("x 12", false), (std::vector<int32_t>{'x', ' ', '1', '2'}));
}

// Qwen2's pattern: Llama 3's with one digit at a time.
TEST(SplitPretokens, Qwen2Pattern) {
  const SplitPattern p = SplitPattern::kQwen2;
  EXPECT_EQ(split("x 1234", p), (Pieces{"x", " ", "1", "2", "3", "4"}));
  EXPECT_EQ(split("DON'T we'LL", p), (Pieces{"DON", "'T", " we", "'LL"}));
}

// Token ids that are not whole numbers in [0, 2^31 - 1] are one-line errors (fuzz_tokenizer
// found a float id, 2.4e51, converted with undefined behaviour; a large integer used to be
// truncated silently).
TEST(ByteLevelBpe, TokenIdsMustBeWholeNumbersInRange) {
  json float_id = tiny_tokenizer_json();
  float_id["model"]["vocab"]["hello"] = 2.4e51;
  expect_load_error(float_id,
                    "token 'hello' has id 2.4e+51, not a whole number in [0, 2147483647]");
  json huge_id = tiny_tokenizer_json();
  huge_id["model"]["vocab"]["hello"] = uint64_t{4294967555};
  expect_load_error(huge_id, "token 'hello' has id 4294967555");
  json negative_added = tiny_tokenizer_json();
  negative_added["added_tokens"][0]["id"] = -1;
  expect_load_error(negative_added, "token '<|begin_of_text|>' has id -1");
  json text_id = tiny_tokenizer_json();
  text_id["model"]["vocab"]["hello"] = "259";
  expect_load_error(text_id, "token 'hello' has id \"259\"");
}

// A deeply nested value is refused before any of it is parsed or printed (a 100000-deep
// "normalizer" overflowed the stack while its error line printed it).
TEST(ByteLevelBpe, DeeplyNestedFileIsOneError) {
  const std::string tiny = tiny_tokenizer_json().dump();
  const std::string deep = std::string(100000, '[') + std::string(100000, ']');
  // The tiny tokenizer with "normalizer": <deep> as its first member.
  const std::string text = "{\"normalizer\": " + deep + ", " + tiny.substr(1);
  TempDir dir;
  const auto path = dir.path() / "tokenizer.json";
  std::ofstream(path) << text;
  try {
    ByteLevelBpe::from_tokenizer_json(path);
    ADD_FAILURE() << "expected the nesting bound";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("nested deeper than"), std::string::npos) << e.what();
  }
}

// A field of the wrong JSON type anywhere (found by fuzz_tokenizer: a model "type" that is a
// list) is one error naming the file, not an escaped nlohmann exception.
TEST(ByteLevelBpe, FieldsOfTheWrongTypeAreOneError) {
  json list_type = tiny_tokenizer_json();
  list_type["model"]["type"] = json::array({"h e", "l l"});
  expect_load_error(list_type, "not a valid tokenizer.json");
  json text_fallback = tiny_tokenizer_json();
  text_fallback["model"]["byte_fallback"] = "yes";
  expect_load_error(text_fallback, "not a valid tokenizer.json");
}

TEST(ByteLevelBpe, SparseIdsAreRefusedBeforeTheTablesAreAllocated) {
  // One id of 400 million in a 265-token file would size the id tables at ~13 GB (found by
  // fuzz_tokenizer as a 3.2 GB allocation).
  json sparse = tiny_tokenizer_json();
  sparse["added_tokens"][2]["id"] = 400000000;
  expect_load_error(sparse, "token ids are too sparse: the largest id is 400000000");
}

// The 256 byte tokens (ids 0..255 in byte order), then `tokens` (ids from 256, ASCII), and
// `merges` in rank order, for the GPT-2 pattern.
BpeModelSpec bytes_and(const std::vector<std::string>& tokens,
                       std::vector<std::pair<std::string, std::string>> merges) {
  BpeModelSpec spec;
  for (int b = 0; b < 256; ++b) {
    spec.vocab.emplace_back(spelled(std::string(1, static_cast<char>(b))), b);
  }
  for (const std::string& token : tokens) {
    spec.vocab.emplace_back(token, static_cast<int32_t>(spec.vocab.size()));
  }
  spec.merges = std::move(merges);
  return spec;
}

// Added tokens that are prefixes of one another, share first bytes, repeat a content under two
// ids (the first listed wins), and start with bytes >= 0x80 (the sorted order is unsigned).
TEST(AddedTokenMatcher, LeftmostLongestAsTheReference) {
  BpeModelSpec spec = bytes_and({"ab", "abc"}, {{"a", "b"}, {"ab", "c"}});
  const std::vector<std::string> added = {"<",        "<a",   "<ab", "<abc>", "ab>",   "<ab",
                                          "\xC3\xA9", "\xC3", "c<a", "bc",    "<abc>>"};
  for (size_t i = 0; i < added.size(); ++i) {
    spec.added_tokens.push_back({added[i], 300 + static_cast<int32_t>(i), false});
  }
  const ByteLevelBpe bpe(spec, "test");
  EXPECT_EQ(bpe.encode("x<ab y", false), (std::vector<int32_t>{'x', 302, ' ', 'y'}));
  std::mt19937 rng(7);
  const std::string alphabet[] = {"<", "a", "b", "c", ">", " ", "\xC3\xA9", "\xC3"};
  for (int trial = 0; trial < 200; ++trial) {
    std::string text;
    for (int i = 0; i < 40; ++i) text += alphabet[rng() % 8];
    EXPECT_EQ(bpe.encode(text, false), bpe.encode_reference(text, false))
        << json(text).dump(-1, ' ', false, json::error_handler_t::replace);
  }
}

// Merges whose ranks do not follow the order the tokens were built in (a hand-written file may
// do that; trained ones never do): merging (a, b) makes (ab, c), which ranks lower, so the fast
// merge's queue must go back to a lower rank, and to positions left of where it was, exactly as
// the rescan does. Long pre-tokens, so that the queue for long ones is the one used.
TEST(ByteLevelBpe, MergesOutOfRankOrderAsTheReference) {
  // Rank 0 needs "ab", which only rank 1 makes.
  const std::vector<std::pair<std::string, std::string>> merges = {
      {"ab", "c"}, {"a", "b"}, {"c", "a"}, {"abc", "abc"},
      {"b", "ca"}, {"c", "c"}, {"a", "a"}, {"aa", "aa"}};
  const ByteLevelBpe bpe(
      bytes_and({"ab", "abc", "ca", "abcabc", "bca", "cc", "aa", "aaaa"}, merges), "test");
  EXPECT_EQ(bpe.encode_pretoken("abcabc"), (std::vector<int32_t>{259}));
  std::mt19937 rng(11);
  for (int trial = 0; trial < 60; ++trial) {
    std::string text;
    for (int i = 0; i < 300; ++i) text += "abc"[rng() % (trial % 2 ? 3 : 2)];
    EXPECT_EQ(bpe.encode_pretoken(text), bpe.encode_pretoken_reference(text)) << text;
  }
}

}  // namespace
}  // namespace maxctx::tokenizer

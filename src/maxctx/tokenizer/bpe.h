// Byte-level BPE (GPT-2, Llama 3, Qwen, SmolLM2/StarCoder2) and tiktoken rank files: the
// pre-tokenizer split, the byte-to-unicode map and the merges, written out by hand (no regex
// library here has lookahead or \p{L}).
//
// Encoding, as Hugging Face tokenizers and tiktoken do it: added (special) tokens are cut out of
// the text first (leftmost, longest); each remaining span is NFC-normalized when the file says
// so (Qwen), cut around digits by a Digits pre-tokenizer (SmolLM2: every digit alone), and split
// into pre-tokens by the model's pattern (split_pretokens); each pre-token's UTF-8 bytes start as
// one symbol per byte and the adjacent pair with the lowest merge rank is merged until no pair
// has a rank (with ignore_merges, a pre-token that is itself in the vocabulary is taken whole
// first). A byte whose single-byte token the vocabulary lacks (SmolLM2 lacks 21) is dropped
// before merging, or becomes the model's unk_token when it has one, as tokenizers' BPE does.
// Internally every token is its raw bytes; the byte-to-unicode map is only the spelling of the
// files. Not supported, and refused at load with the component named: other normalizers,
// add_prefix_space, dropout, byte_fallback, subword prefixes/suffixes, other split patterns,
// added tokens that strip whitespace or match single words.
//
// Time (issue #34 N6): encode is O(n log n) in the text's length whatever the text, since a
// pre-token can be the whole text (a run of one letter or of spaces): the merges go through a
// priority queue of adjacent pairs (bpe_encode.cpp), and the added tokens are found by narrowing
// a sorted list byte by byte, so each byte of text costs at most the longest added token's
// length times a binary search. encode_reference runs the plain algorithms (every pair
// rescanned after each merge, every added token tried at every byte): the oracle the fast ones
// are tested against. bench/tokenizer measures the time on hostile inputs.
#pragma once

#include <array>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "maxctx/tokenizer/bpe_tables.h"
#include "maxctx/tokenizer/tokenizer.h"

namespace maxctx::tokenizer {

// The split patterns maxctx implements; split_pattern_regex is the pattern's text exactly as
// tokenizer.json spells it (how the loader recognises it).
enum class SplitPattern {
  // 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
  kGpt2,
  // (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|
  // \s*[\r\n]+|\s+(?!\S)|\s+   (the contractions' case-insensitivity is ASCII only)
  kLlama3,
  // Qwen2/Qwen3: Llama 3's pattern with single digits (\p{N} for \p{N}{1,3})
  kQwen2,
};

// A Digits pre-tokenizer before the split: each number character alone (individual_digits, as
// SmolLM2 and StarCoder2), or each run of them, cut out as its own pre-token.
enum class DigitSplit { kNone, kIndividual, kRuns };
std::string_view split_pattern_regex(SplitPattern pattern);

// The pre-tokens of UTF-8 `text`: the matches of the pattern's find-all, in order; they
// concatenate to `text`. Bytes that are not valid UTF-8 count as one non-letter, non-number,
// non-space character each.
std::vector<std::string_view> split_pretokens(std::string_view text, SplitPattern pattern);
// The pieces of a Digits pre-tokenizer (tokenizers' behavior Isolated): number characters alone
// (kIndividual) or in runs (kRuns), the text between them as it is; they concatenate to `text`.
std::vector<std::string_view> split_digits(std::string_view text, DigitSplit digits);

// GPT-2's bytes_to_unicode: printable Latin-1 bytes map to themselves, the other 68 bytes to
// U+0100.. in byte order, so every token is spelled in visible characters.
const std::array<char32_t, 256>& byte_to_unicode();
// The bytes a token spelled that way stands for; nullopt when a character is outside the map.
std::optional<std::string> unicode_to_bytes(std::string_view spelled);

struct AddedToken {
  std::string content;  // matched verbatim in the text
  int32_t id = 0;
  bool special = false;  // special tokens decode to nothing (BOS, EOS, chat markers)
};

// What a byte-level BPE tokenizer is made of, with token strings in the files' spelling
// (byte_to_unicode). The loaders fill it; ByteLevelBpe validates it.
struct BpeModelSpec {
  std::vector<std::pair<std::string, int32_t>> vocab;
  std::vector<std::pair<std::string, std::string>> merges;  // in rank order
  std::vector<AddedToken> added_tokens;
  SplitPattern pattern = SplitPattern::kGpt2;
  DigitSplit digits = DigitSplit::kNone;
  bool nfc = false;  // normalizer NFC (Qwen)
  bool ignore_merges = false;
  // tiktoken's rule instead of merges: any adjacent pair whose concatenation is a token merges,
  // the lowest-ranked (lowest id) first.
  bool merge_by_rank = false;
  std::string unk_token;  // a byte without a single-byte token becomes this; empty: dropped
  bool fuse_unk = false;  // consecutive unknown bytes give one unk_token
  std::string bos_token;  // contents of the BOS/EOS tokens; empty: none
  std::string eos_token;
};

class ByteLevelBpe final : public Tokenizer {
 public:
  // Every error names `origin` (the file the spec came from): a vocabulary token outside the
  // byte map, a duplicate id, a merge whose parts or result are not in the vocabulary, a
  // BOS/EOS/unk that is no token.
  ByteLevelBpe(BpeModelSpec spec, const std::string& origin);

  // A Hugging Face tokenizer.json (model.type BPE, ByteLevel pre-tokenizer, optionally after a
  // Split with one of the known patterns). BOS/EOS come from tokenizer_config.json next to it
  // when present, else the post-processor's template, else the usual names
  // (<|begin_of_text|>/<|end_of_text|>, <s>/</s>, <|endoftext|>).
  static std::unique_ptr<ByteLevelBpe> from_tokenizer_json(const std::filesystem::path& path);
  // GPT-2's encoder.json (token -> id) and vocab.bpe (a "#version" line, then one "a b" merge
  // per line); the GPT-2 pattern, <|endoftext|> as BOS and EOS (decoded to nothing), and no
  // added tokens (as OpenAI's encoder.py: "<|endoftext|>" in the text is ordinary text).
  static std::unique_ptr<ByteLevelBpe> from_gpt2_files(const std::filesystem::path& encoder_json,
                                                       const std::filesystem::path& vocab_bpe);
  // A tiktoken rank file ("<base64 token> <rank>" lines; MaxText's tokenizer_llama3.tiktoken,
  // Meta's Llama 3 tokenizer.model) with MaxText's Llama 3 setup (input_pipeline/tokenizer.py
  // TikTokenTokenizer): the Llama 3 pattern, 256 special tokens numbered from the file's size
  // (<|begin_of_text|> BOS, <|end_of_text|> EOS, <|start_header_id|>, <|end_header_id|>,
  // <|eot_id|>, <|reserved_special_token_N|>), which are recognised in the text as
  // allowed_special="all" and the Hugging Face conversion do.
  static std::unique_ptr<ByteLevelBpe> from_tiktoken(const std::filesystem::path& path);

  std::vector<int32_t> encode(std::string_view text, bool add_bos) const override;
  // The same ids by the plain algorithms, quadratic in a pre-token's length and in the number of
  // added tokens: for tests only.
  std::vector<int32_t> encode_reference(std::string_view text, bool add_bos) const;
  std::string decode(std::span<const int32_t> ids) const override;
  int32_t bos_id() const override { return bos_id_; }
  int32_t eos_id() const override { return eos_id_; }
  int64_t vocab_size() const override { return static_cast<int64_t>(id_to_bytes_.size()); }
  std::string_view kind() const override { return "byte-level BPE"; }

  SplitPattern pattern() const { return pattern_; }
  // The ids of one pre-token's bytes through the merges alone (no split, no added tokens).
  std::vector<int32_t> encode_pretoken(std::string_view bytes) const;
  std::vector<int32_t> encode_pretoken_reference(std::string_view bytes) const;
  // The id of a token given by its raw bytes; -1 when absent.
  int32_t token_id(std::string_view bytes) const;

 private:
  struct MergeScratch;  // the fast merge's buffers, reused across the pre-tokens of one text
  enum class Algorithm { kFast, kReference };

  std::vector<int32_t> encode_with(std::string_view text, bool add_bos, Algorithm algorithm) const;
  void encode_span(std::string_view text, Algorithm algorithm, MergeScratch& scratch,
                   std::vector<int32_t>& out) const;
  void encode_pretoken_into(std::string_view bytes, Algorithm algorithm, MergeScratch& scratch,
                            std::vector<int32_t>& out) const;
  void initial_symbols(std::string_view bytes, std::vector<int32_t>& symbols) const;
  void merge_fast(std::vector<int32_t>& symbols, MergeScratch& scratch) const;
  void merge_reference(std::vector<int32_t>& symbols) const;
  const AddedToken* added_token_at(std::string_view text, size_t at) const;
  const AddedToken* added_token_at_reference(std::string_view text, size_t at) const;

  SplitPattern pattern_;
  DigitSplit digits_;
  bool nfc_;
  bool ignore_merges_;
  int32_t unk_id_ = -1;
  bool fuse_unk_ = false;
  BpeTokenTable bytes_to_id_;
  std::vector<std::string> id_to_bytes_;  // raw bytes of every id ("" for unused ids)
  std::vector<uint8_t> is_special_;       // per id: decodes to nothing
  std::array<int32_t, 256> byte_id_{};    // the single-byte token of each byte, or -1
  BpeMergeTable merges_;
  std::vector<AddedToken> added_;  // longest first
  // Indices into added_ sorted by content, one per content (the first in added_'s order);
  // added_by_first_byte_[b] .. [b + 1] is the part whose contents start with byte b.
  std::vector<int32_t> added_sorted_;
  std::array<uint32_t, 257> added_by_first_byte_{};
  int32_t bos_id_ = -1;
  int32_t eos_id_ = -1;
};

}  // namespace maxctx::tokenizer

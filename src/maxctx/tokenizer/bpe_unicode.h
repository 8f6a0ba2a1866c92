// The few Unicode facts the byte-level BPE pre-tokenizer needs: UTF-8 decoding and the classes
// \p{L} (letters), \p{N} (numbers) and \s (the White_Space property) of the split patterns.
//
// Not a Unicode library: no normalisation, no case folding, no scripts. The L and N ranges are
// generated (tools/reference/unicode_tables.py, bpe_unicode_tables.cpp); White_Space is the
// fixed 25-code-point list of the Unicode standard, as Rust's regex and Oniguruma (Hugging Face
// tokenizers, tiktoken) use for \s. JavaScript's \s differs in two code points: it adds U+FEFF
// and lacks U+0085.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace maxctx::tokenizer::unicode {

struct CodePointRange {
  char32_t first;
  char32_t last;  // inclusive
};

extern const CodePointRange kLetterRanges[];
extern const size_t kLetterRangeCount;
extern const CodePointRange kNumberRanges[];
extern const size_t kNumberRangeCount;

bool is_letter(char32_t cp);
bool is_number(char32_t cp);
bool is_whitespace(char32_t cp);

// One code point of UTF-8 text: its value and its length in bytes. A byte that does not start a
// well-formed sequence (bad lead byte, truncated or overlong sequence, surrogate, > U+10FFFF)
// decodes as kInvalid of length 1, so every input byte belongs to exactly one code point.
inline constexpr char32_t kInvalid = 0xFFFFFFFF;
struct DecodedCodePoint {
  char32_t cp;
  int length;
};
DecodedCodePoint decode_utf8(std::string_view text, size_t offset);

// Appends the UTF-8 encoding of a valid code point.
void append_utf8(char32_t cp, std::string& out);

}  // namespace maxctx::tokenizer::unicode

// The GPT-2, Llama 3 and Qwen2 split patterns, evaluated by hand, plus the Unicode helpers they
// need.
//
// A regex find-all tries the alternatives in order at the current position and takes the first
// that matches (greedy quantifiers, backtracking inside an alternative), then continues after
// the match. Each alternative below is a function of the position returning where its match
// ends, or `kNoMatch`; the comments give the backtracking argument where it is not a plain run.
// Every position matches some alternative (a character is a letter, a number, whitespace or
// "other"), so the pieces tile the text. Linear in the text: an alternative scans only what it
// takes, except that a whitespace run may be scanned a few times (forward, back to its last line
// break, then by the next match).
#include <algorithm>
#include <cstdint>

#include "maxctx/tokenizer/bpe.h"
#include "maxctx/tokenizer/bpe_unicode.h"

namespace maxctx::tokenizer {

namespace unicode {
namespace {

bool in_ranges(char32_t cp, const CodePointRange* ranges, size_t count) {
  const CodePointRange* end = ranges + count;
  const CodePointRange* it = std::upper_bound(
      ranges, end, cp, [](char32_t value, const CodePointRange& r) { return value < r.first; });
  return it != ranges && cp <= (it - 1)->last;
}

}  // namespace

bool is_letter(char32_t cp) {
  if (cp < 0x80) return (cp >= 'a' && cp <= 'z') || (cp >= 'A' && cp <= 'Z');
  return cp != kInvalid && in_ranges(cp, kLetterRanges, kLetterRangeCount);
}

bool is_number(char32_t cp) {
  if (cp < 0x80) return cp >= '0' && cp <= '9';
  return cp != kInvalid && in_ranges(cp, kNumberRanges, kNumberRangeCount);
}

bool is_whitespace(char32_t cp) {
  switch (cp) {
    case 0x09:
    case 0x0A:
    case 0x0B:
    case 0x0C:
    case 0x0D:
    case 0x20:
    case 0x85:
    case 0xA0:
    case 0x1680:
    case 0x2028:
    case 0x2029:
    case 0x202F:
    case 0x205F:
    case 0x3000:
      return true;
    default:
      return cp >= 0x2000 && cp <= 0x200A;
  }
}

DecodedCodePoint decode_utf8(std::string_view text, size_t offset) {
  const auto byte = [&](size_t i) { return static_cast<uint8_t>(text[i]); };
  const uint8_t lead = byte(offset);
  if (lead < 0x80) return {lead, 1};
  int length = 0;
  char32_t cp = 0;
  char32_t min_value = 0;
  if ((lead & 0xE0) == 0xC0) {
    length = 2, cp = lead & 0x1F, min_value = 0x80;
  } else if ((lead & 0xF0) == 0xE0) {
    length = 3, cp = lead & 0x0F, min_value = 0x800;
  } else if ((lead & 0xF8) == 0xF0) {
    length = 4, cp = lead & 0x07, min_value = 0x10000;
  } else {
    return {kInvalid, 1};
  }
  if (offset + length > text.size()) return {kInvalid, 1};
  for (int i = 1; i < length; ++i) {
    const uint8_t b = byte(offset + i);
    if ((b & 0xC0) != 0x80) return {kInvalid, 1};
    cp = (cp << 6) | (b & 0x3F);
  }
  if (cp < min_value || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return {kInvalid, 1};
  return {cp, length};
}

void append_utf8(char32_t cp, std::string& out) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

}  // namespace unicode

namespace {

enum class CharClass : uint8_t { kLetter, kNumber, kSpace, kOther };

constexpr size_t kNoMatch = static_cast<size_t>(-1);

// The text as code points with their classes; offsets[i] is where code point i starts
// (offsets[n] = the byte length).
struct CodePoints {
  std::vector<char32_t> cp;
  std::vector<CharClass> cls;
  std::vector<size_t> offsets;

  explicit CodePoints(std::string_view text) {
    for (size_t at = 0; at < text.size();) {
      const unicode::DecodedCodePoint d = unicode::decode_utf8(text, at);
      cp.push_back(d.cp);
      cls.push_back(unicode::is_letter(d.cp)       ? CharClass::kLetter
                    : unicode::is_number(d.cp)     ? CharClass::kNumber
                    : unicode::is_whitespace(d.cp) ? CharClass::kSpace
                                                   : CharClass::kOther);
      offsets.push_back(at);
      at += d.length;
    }
    offsets.push_back(text.size());
  }
  size_t size() const { return cp.size(); }
  bool is(size_t i, CharClass c) const { return i < size() && cls[i] == c; }
  bool is_crlf(size_t i) const { return i < size() && (cp[i] == '\r' || cp[i] == '\n'); }
  // End of the maximal run of class c starting at i (i itself when cls[i] != c), stopping at
  // `limit`: a bounded quantifier must not scan the whole run (issue #34 N6).
  size_t run(size_t i, CharClass c, size_t limit = SIZE_MAX) const {
    while (i < limit && is(i, c)) ++i;
    return i;
  }
};

char32_t ascii_lower(char32_t c) { return c >= 'A' && c <= 'Z' ? c + ('a' - 'A') : c; }

// 's|'t|'re|'ve|'m|'ll|'d, optionally ASCII case-insensitive.
size_t match_contraction(const CodePoints& t, size_t i, bool ignore_case) {
  if (t.cp[i] != '\'' || i + 1 >= t.size()) return kNoMatch;
  const auto at = [&](size_t j) {
    if (j >= t.size()) return char32_t{0};
    return ignore_case ? ascii_lower(t.cp[j]) : t.cp[j];
  };
  const char32_t a = at(i + 1);
  if (a == 's' || a == 't' || a == 'm' || a == 'd') return i + 2;
  const char32_t b = at(i + 2);
  if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) return i + 3;
  return kNoMatch;
}

// \s+(?!\S)|\s+ at a whitespace character: the greedy run, given back by one character when a
// non-space follows it (so that the space can lead the next word), unless the run is a single
// character, which the plain \s+ then takes.
size_t match_trailing_space(const CodePoints& t, size_t i) {
  const size_t end = t.run(i, CharClass::kSpace);
  if (end == t.size() || end - i == 1) return end;
  return end - 1;
}

size_t next_gpt2(const CodePoints& t, size_t i) {
  if (size_t e = match_contraction(t, i, false); e != kNoMatch) return e;
  // ` ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+`: the classes are disjoint, so the optional space
  // joins whichever run follows it; a space followed by whitespace joins none.
  const size_t j =
      (t.cp[i] == ' ' && i + 1 < t.size() && !t.is(i + 1, CharClass::kSpace)) ? i + 1 : i;
  if (t.cls[j] != CharClass::kSpace) return t.run(j, t.cls[j]);
  return match_trailing_space(t, i);
}

// Llama 3's pattern, and Qwen2's, which differs only in taking digits one at a time
// (`max_digits` 3 and 1).
size_t next_llama3(const CodePoints& t, size_t i, size_t max_digits) {
  if (size_t e = match_contraction(t, i, true); e != kNoMatch) return e;
  // [^\r\n\p{L}\p{N}]?\p{L}+ : a letter run, optionally led by one character that is neither a
  // line break, a letter nor a number. (A letter cannot be the optional character, so a letter
  // at i just starts the run.)
  if (t.is(i, CharClass::kLetter)) return t.run(i, CharClass::kLetter);
  if (!t.is_crlf(i) && !t.is(i, CharClass::kNumber) && t.is(i + 1, CharClass::kLetter)) {
    return t.run(i + 1, CharClass::kLetter);
  }
  // \p{N}{1,3} (Qwen2: \p{N})
  if (t.is(i, CharClass::kNumber)) return t.run(i, CharClass::kNumber, i + max_digits);
  // ` ?[^\s\p{L}\p{N}]+[\r\n]*`
  const size_t j = (t.cp[i] == ' ' && t.is(i + 1, CharClass::kOther)) ? i + 1 : i;
  if (t.is(j, CharClass::kOther)) {
    size_t e = t.run(j, CharClass::kOther);
    while (t.is_crlf(e)) ++e;
    return e;
  }
  // Only whitespace is left. \s*[\r\n]+ : \s* gives back until a line break follows; the
  // match ends after the last line break of the whitespace run (nothing after it in the run is
  // a line break, and the run ends at a non-space).
  const size_t end = t.run(i, CharClass::kSpace);
  for (size_t k = end; k > i; --k) {
    if (t.is_crlf(k - 1)) return k;
  }
  return match_trailing_space(t, i);
}

}  // namespace

std::string_view split_pattern_regex(SplitPattern pattern) {
  switch (pattern) {
    case SplitPattern::kGpt2:
      return R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";
    case SplitPattern::kLlama3:
      return R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
    case SplitPattern::kQwen2:
      return R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
  }
  return {};
}

std::vector<std::string_view> split_pretokens(std::string_view text, SplitPattern pattern) {
  const CodePoints t(text);
  std::vector<std::string_view> pieces;
  for (size_t i = 0; i < t.size();) {
    const size_t end = pattern == SplitPattern::kGpt2     ? next_gpt2(t, i)
                       : pattern == SplitPattern::kLlama3 ? next_llama3(t, i, 3)
                                                          : next_llama3(t, i, 1);
    pieces.push_back(text.substr(t.offsets[i], t.offsets[end] - t.offsets[i]));
    i = end;
  }
  return pieces;
}

std::vector<std::string_view> split_digits(std::string_view text, DigitSplit digits) {
  // tokenizers' Digits uses Rust's char::is_numeric, the categories Nd, Nl and No: \p{N}.
  std::vector<std::string_view> pieces;
  size_t begin = 0;  // start of the current non-digit run
  for (size_t at = 0; at < text.size();) {
    const unicode::DecodedCodePoint d = unicode::decode_utf8(text, at);
    if (!unicode::is_number(d.cp)) {
      at += d.length;
      continue;
    }
    if (at > begin) pieces.push_back(text.substr(begin, at - begin));
    size_t end = at + d.length;
    while (digits == DigitSplit::kRuns && end < text.size()) {
      const unicode::DecodedCodePoint next = unicode::decode_utf8(text, end);
      if (!unicode::is_number(next.cp)) break;
      end += next.length;
    }
    pieces.push_back(text.substr(at, end - at));
    at = begin = end;
  }
  if (begin < text.size()) pieces.push_back(text.substr(begin));
  return pieces;
}

}  // namespace maxctx::tokenizer

#include "maxctx/tokenizer/normalize.h"

#include <unicode/bytestream.h>
#include <unicode/normalizer2.h>

#include "maxctx/core/check.h"
#include "maxctx/tokenizer/bpe_unicode.h"

namespace maxctx::tokenizer {
namespace {

const icu::Normalizer2& nfc_instance() {
  static const icu::Normalizer2* instance = [] {
    UErrorCode status = U_ZERO_ERROR;
    const icu::Normalizer2* n = icu::Normalizer2::getNFCInstance(status);
    if (U_FAILURE(status)) fail("ICU has no NFC normalizer ({})", u_errorName(status));
    return n;
  }();
  return *instance;
}

// NFC of well-formed UTF-8 appended to out.
void append_nfc(std::string_view valid, std::string& out) {
  const icu::Normalizer2& n = nfc_instance();
  const icu::StringPiece piece(valid.data(), static_cast<int32_t>(valid.size()));
  UErrorCode status = U_ZERO_ERROR;
  if (n.isNormalizedUTF8(piece, status) && U_SUCCESS(status)) {
    out.append(valid);
    return;
  }
  status = U_ZERO_ERROR;
  icu::StringByteSink<std::string> sink(&out);
  n.normalizeUTF8(0, piece, sink, nullptr, status);
  if (U_FAILURE(status)) fail("NFC normalization failed ({})", u_errorName(status));
}

}  // namespace

std::string nfc(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  size_t run = 0;  // start of the current well-formed run
  for (size_t at = 0; at < text.size();) {
    const unicode::DecodedCodePoint d = unicode::decode_utf8(text, at);
    if (d.cp != unicode::kInvalid) {
      at += static_cast<size_t>(d.length);
      continue;
    }
    append_nfc(text.substr(run, at - run), out);
    out += text[at];
    run = ++at;
  }
  append_nfc(text.substr(run), out);
  return out;
}

}  // namespace maxctx::tokenizer

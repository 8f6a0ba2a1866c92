// Unicode normalization for tokenizers whose tokenizer.json asks for it (normalizer NFC: Qwen2,
// Qwen3), through ICU's Normalizer2, as Hugging Face tokenizers' NFC does through Rust's
// unicode-normalization. Only the well-formed UTF-8 runs of the text are normalized; bytes that
// are not UTF-8 pass through as they are (tokenizers only ever sees valid strings).
#pragma once

#include <string>
#include <string_view>

namespace maxctx::tokenizer {

// The NFC form of `text` (canonical decomposition, then canonical composition).
std::string nfc(std::string_view text);

}  // namespace maxctx::tokenizer

// Untrusted JSON (a safetensors header, a Hugging Face config.json or tokenizer file, a
// golden-logits line) checked in one linear SAX pass before it is built into a tree: nesting
// deeper than kMaxJsonDepth is refused (a deep value overflows the stack when the tree is
// destroyed or printed), and a key repeated at the top level is reported (nlohmann keeps the last
// silently). In core/ so that every area reading JSON (io, model, tokenizer) shares it.
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace maxctx {

inline constexpr int kMaxJsonDepth = 64;

struct JsonCheck {
  std::optional<std::string> error;              // not JSON, or nested too deep
  bool too_deep = false;                         // the error is the nesting bound
  std::optional<std::string> duplicate_top_key;  // the first top-level key seen twice
};

JsonCheck check_json(std::string_view text);

}  // namespace maxctx

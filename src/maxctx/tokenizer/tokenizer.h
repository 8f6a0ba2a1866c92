// Tokenizers: text to token ids and back, for prompts (decode) and text data.
//
// Two kinds, chosen by the file (load_tokenizer): SentencePiece models (Llama 1/2, Mistral,
// Gemma, through libsentencepiece) and byte-level BPE (Llama 3, GPT-2, Qwen, SmolLM2: a Hugging
// Face tokenizer.json, GPT-2's encoder.json + vocab.bpe pair, or a tiktoken rank file; see
// bpe.h). BOS and EOS follow Llama: encode
// prepends BOS when asked and never appends EOS (generation stops at eos_id()); decode drops
// control/special tokens (BOS, EOS, ...) and concatenates the rest's bytes, so its result is
// exactly the encoded text for ids that came from encode.
// Invariant: every id encode returns is in [0, vocab_size()); decode rejects any other id with
// a maxctx::Error naming it.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace maxctx::tokenizer {

// The largest tokenizer file read (tokenizer.json, a SentencePiece model, vocab.bpe, ...): real
// ones are 1-30 MB; the bound keeps a hostile or mistaken path from being read without end.
inline constexpr int64_t kMaxTokenizerFileBytes = int64_t{1} << 30;

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;

  // The ids of `text`, with bos_id() first when add_bos (an error when the model has no BOS).
  virtual std::vector<int32_t> encode(std::string_view text, bool add_bos) const = 0;
  virtual std::string decode(std::span<const int32_t> ids) const = 0;
  virtual int32_t bos_id() const = 0;  // -1 when the model defines none
  virtual int32_t eos_id() const = 0;  // -1 when the model defines none
  virtual int64_t vocab_size() const = 0;
  // "sentencepiece" or "byte-level BPE", for messages.
  virtual std::string_view kind() const = 0;
};

// Chooses by content, not by name:
//  - a directory: its tokenizer.model when that is a SentencePiece model, else its
//    tokenizer.json, else its encoder.json (+ vocab.bpe);
//  - a JSON file with a "model" object: a Hugging Face tokenizer.json (byte-level BPE only);
//  - any other JSON object of token -> id: GPT-2's encoder.json (or vocab.json), with vocab.bpe
//    (or merges.txt) next to it;
//  - a tiktoken rank file ("<base64> <rank>" lines: MaxText's tokenizer_llama3.tiktoken, Meta's
//    original Llama 3 tokenizer.model): byte-level BPE with MaxText's Llama 3 setup;
//  - anything else: a SentencePiece model proto.
// `path` goes through resolve_tokenizer_path first. Every problem is a maxctx::Error naming the
// path and what was expected.
std::unique_ptr<Tokenizer> load_tokenizer(const std::string& path);

// MaxText's relative asset names: `assets/<name>` that does not exist as written is looked up
// in the assets directory ($MAXCTX_ASSETS, default ~/.cache/maxctx/assets) as <dir>/<name>,
// then <dir>/tokenizers/<name> (the maxtext wheel's layout, which
// tools/reference/fetch_assets.sh copies there). Any other path is returned as it is. When the
// asset is in neither place the error says how to get it.
std::string resolve_tokenizer_path(const std::string& path);

}  // namespace maxctx::tokenizer

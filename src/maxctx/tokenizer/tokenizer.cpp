// load_tokenizer's choice of format, and the SentencePiece tokenizer over libsentencepiece.
#include "maxctx/tokenizer/tokenizer.h"

#include <sentencepiece_processor.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "maxctx/core/check.h"
#include "maxctx/core/input_file.h"
#include "maxctx/core/json_checks.h"
#include "maxctx/tokenizer/bpe.h"

namespace maxctx::tokenizer {
namespace {

namespace fs = std::filesystem;

class SentencePieceTokenizer final : public Tokenizer {
 public:
  explicit SentencePieceTokenizer(const fs::path& path) {
    sentencepiece::util::Status status;
    try {
      // Read through the checked opening (FIFOs, devices, size), not by the library itself.
      status = processor_.LoadFromSerializedProto(
          read_input_file(path, "SentencePiece model", kMaxTokenizerFileBytes));
    } catch (const std::exception& e) {
      // libsentencepiece reports most damage as a status, but its trie builder throws (a
      // piece list it cannot index; found by fuzz_tokenizer).
      fail("{}: not a valid SentencePiece model ({})", path.string(), e.what());
    }
    if (!status.ok()) {
      fail("{}: not a SentencePiece model, tokenizer.json or GPT-2 encoder.json ({})",
           path.string(), status.ToString());
    }
  }

  std::vector<int32_t> encode(std::string_view text, bool add_bos) const override {
    std::vector<int> pieces;
    const sentencepiece::util::Status status =
        processor_.Encode(absl::string_view(text.data(), text.size()), &pieces);
    if (!status.ok()) fail("SentencePiece could not encode the text: {}", status.ToString());
    std::vector<int32_t> ids;
    ids.reserve(pieces.size() + 1);
    if (add_bos) {
      if (bos_id() < 0) fail("this SentencePiece model has no BOS piece; set add_bos=false");
      ids.push_back(bos_id());
    }
    ids.insert(ids.end(), pieces.begin(), pieces.end());
    return ids;
  }

  std::string decode(std::span<const int32_t> ids) const override {
    std::vector<int> pieces(ids.begin(), ids.end());
    for (const int id : pieces) {
      if (id < 0 || id >= vocab_size()) {
        fail("token id {} is outside the vocabulary [0, {})", id, vocab_size());
      }
    }
    std::string text;
    const sentencepiece::util::Status status = processor_.Decode(pieces, &text);
    if (!status.ok()) fail("SentencePiece could not decode the ids: {}", status.ToString());
    return text;
  }

  int32_t bos_id() const override { return processor_.bos_id(); }
  int32_t eos_id() const override { return processor_.eos_id(); }
  int64_t vocab_size() const override { return processor_.GetPieceSize(); }
  std::string_view kind() const override { return "sentencepiece"; }

 private:
  sentencepiece::SentencePieceProcessor processor_;
};

std::string file_head(const fs::path& path, size_t bytes) {
  InputFile in(path, "tokenizer file", kMaxTokenizerFileBytes);
  std::string head(std::min(bytes, static_cast<size_t>(in.size())), '\0');
  if (::pread(in.fd(), head.data(), head.size(), 0) != static_cast<ssize_t>(head.size())) {
    fail("{}: cannot read the tokenizer file", path.string());
  }
  return head;
}

bool looks_like_json(const std::string& head) {
  const size_t first = head.find_first_not_of(" \t\r\n");
  return first != std::string::npos && head[first] == '{';
}

// tiktoken rank files are lines of "<base64 token> <rank>".
bool looks_like_tiktoken(const std::string& head) {
  const size_t newline = head.find('\n');
  const std::string line = head.substr(0, newline);
  const size_t space = line.find(' ');
  if (newline == std::string::npos || space == std::string::npos || space == 0) return false;
  for (size_t i = 0; i < space; ++i) {
    const char c = line[i];
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '+' && c != '/' && c != '=') {
      return false;
    }
  }
  for (size_t i = space + 1; i < line.size(); ++i) {
    if (!std::isdigit(static_cast<unsigned char>(line[i]))) return false;
  }
  return space + 1 < line.size();
}

std::unique_ptr<Tokenizer> load_file(const fs::path& path) {
  const std::string head = file_head(path, 4096);
  if (looks_like_json(head)) {
    const std::string text = read_input_file(path, "tokenizer file", kMaxTokenizerFileBytes);
    if (const JsonCheck check = check_json(text); check.too_deep) {
      fail("{}: the tokenizer file is {}", path.string(), *check.error);
    }
    nlohmann::json root;
    try {
      root = nlohmann::json::parse(text);
    } catch (const nlohmann::json::exception& e) {
      fail("{}: the tokenizer file is not valid JSON ({})", path.string(), e.what());
    }
    if (root.is_object() && root.contains("model")) return ByteLevelBpe::from_tokenizer_json(path);
    for (const char* merges : {"vocab.bpe", "merges.txt"}) {
      const fs::path merges_path = path.parent_path() / merges;
      std::error_code absent;
      if (fs::exists(fs::symlink_status(merges_path, absent)))
        return ByteLevelBpe::from_gpt2_files(path, merges_path);
    }
    fail(
        "{}: a JSON tokenizer is a Hugging Face tokenizer.json (with a \"model\") or GPT-2's "
        "encoder.json with vocab.bpe or merges.txt next to it; neither was found",
        path.string());
  }
  if (looks_like_tiktoken(head)) return ByteLevelBpe::from_tiktoken(path);
  return std::make_unique<SentencePieceTokenizer>(path);
}

}  // namespace

std::string resolve_tokenizer_path(const std::string& path) {
  constexpr std::string_view kPrefix = "assets/";
  if (path.rfind(kPrefix, 0) != 0 || fs::exists(path)) return path;
  const char* env = std::getenv("MAXCTX_ASSETS");
  const char* home = std::getenv("HOME");
  const fs::path dir = env != nullptr    ? fs::path(env)
                       : home != nullptr ? fs::path(home) / ".cache/maxctx/assets"
                                         : fs::path();
  const std::string name = path.substr(kPrefix.size());
  for (const fs::path& candidate : {dir / name, dir / "tokenizers" / name}) {
    if (!dir.empty() && fs::exists(candidate)) return candidate.string();
  }
  fail(
      "tokenizer_path {}: a MaxText asset name, not found here nor in the assets directory {} "
      "($MAXCTX_ASSETS); the maxtext wheel ships it under maxtext/assets/tokenizers/: run "
      "tools/reference/fetch_assets.sh, or give the file's path",
      path, dir.string());
}

std::unique_ptr<Tokenizer> load_tokenizer(const std::string& path_given) {
  if (path_given.empty()) {
    fail("tokenizer_path is empty; set it to a tokenizer.model, a tokenizer.json or a directory");
  }
  const std::string path_text = resolve_tokenizer_path(path_given);
  const fs::path path(path_text);
  // Present as a name, even a dangling or looping symlink: opening it then says which.
  const auto present = [](const fs::path& p) {
    std::error_code error;
    return fs::exists(fs::symlink_status(p, error));
  };
  if (!present(path)) fail("tokenizer_path {}: no such file or directory", path_text);
  std::error_code error;
  if (!fs::is_directory(path, error)) return load_file(path);
  // A checkpoint directory: its SentencePiece model, else its tokenizer.json, else a tiktoken
  // tokenizer.model (Meta's original Llama 3 files ship only that).
  const fs::path sp_model = path / "tokenizer.model";
  const bool tiktoken_model = present(sp_model) && looks_like_tiktoken(file_head(sp_model, 4096));
  if (present(sp_model) && !tiktoken_model) return load_file(sp_model);
  for (const char* name : {"tokenizer.json", "encoder.json", "vocab.json"}) {
    if (present(path / name)) return load_file(path / name);
  }
  if (tiktoken_model) return load_file(sp_model);
  fail(
      "tokenizer_path {}: the directory has no tokenizer.model (SentencePiece), tokenizer.json "
      "or encoder.json",
      path_text);
}

}  // namespace maxctx::tokenizer

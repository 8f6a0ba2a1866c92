// Byte-level BPE: the model (merges over token ids) and its file formats; encoding is in
// bpe_encode.cpp. See bpe.h.
#include "maxctx/tokenizer/bpe.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>

#include "maxctx/core/check.h"
#include "maxctx/core/input_file.h"
#include "maxctx/core/json_checks.h"
#include "maxctx/tokenizer/bpe_unicode.h"
#include "maxctx/tokenizer/normalize.h"

namespace maxctx::tokenizer {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

// A token or line for an error message, JSON-quoted; bytes that are not UTF-8 (a GPT-2 vocab.bpe
// may hold any) are replaced rather than making the quoting throw (issue #34 N10).
std::string json_quoted(std::string_view text) {
  return json(std::string(text)).dump(-1, ' ', false, json::error_handler_t::replace);
}

std::string read_file(const fs::path& path, const char* what) {
  return read_input_file(path, what, kMaxTokenizerFileBytes);
}

json parse_json_file(const fs::path& path, const char* what) {
  const std::string text = read_file(path, what);
  // Bounded nesting first: error lines print parts of the file (a 100000-deep "normalizer"
  // overflowed the stack while being printed).
  if (const JsonCheck check = check_json(text); check.too_deep) {
    fail("{}: the {} is {}", path.string(), what, *check.error);
  }
  try {
    return json::parse(text);
  } catch (const json::exception& e) {
    fail("{}: the {} is not valid JSON ({})", path.string(), what, e.what());
  }
}

// The text of a token named in tokenizer_config.json: a string or {"content": ...}.
std::string token_content(const json& value) {
  if (value.is_string()) return value.get<std::string>();
  if (value.is_object() && value.contains("content") && value.at("content").is_string()) {
    return value.at("content").get<std::string>();
  }
  return {};
}

struct PreTokenizer {
  SplitPattern pattern = SplitPattern::kGpt2;
  DigitSplit digits = DigitSplit::kNone;
};

// The pre_tokenizer of a tokenizer.json: an optional Digits first, then ByteLevel with its own
// regex (the GPT-2 pattern), or a Split with a known pattern and a ByteLevel without its regex.
// That covers GPT-2, Llama 3, Qwen and SmolLM2/StarCoder2 (Digits + ByteLevel).
PreTokenizer parse_pre_tokenizer(const json& pre, const fs::path& path) {
  const auto refuse = [&](const std::string& why) {
    fail(
        "{}: pre_tokenizer {} is not supported ({}); byte-level BPE needs ByteLevel, optionally "
        "after Digits and a Split with the GPT-2, Llama 3 or Qwen2 pattern. A SentencePiece-style "
        "tokenizer.json (Llama 2) is read from the checkpoint's tokenizer.model instead",
        path.string(), pre.dump().substr(0, 300), why);
  };
  std::vector<json> steps;
  const std::string type = pre.is_object() ? pre.value("type", "") : "";
  if (type == "Sequence" && pre.contains("pretokenizers") && pre.at("pretokenizers").is_array()) {
    for (const json& step : pre.at("pretokenizers")) steps.push_back(step);
  } else {
    steps.push_back(pre);
  }
  PreTokenizer out;
  size_t at = 0;
  const auto step_type = [&](size_t i) {
    return i < steps.size() && steps[i].is_object() ? steps[i].value("type", "") : "";
  };
  if (step_type(at) == "Digits") {
    out.digits =
        steps[at].value("individual_digits", false) ? DigitSplit::kIndividual : DigitSplit::kRuns;
    ++at;
  }
  std::optional<SplitPattern> split;
  if (step_type(at) == "Split") {
    const json& node = steps[at];
    if (node.value("behavior", "") != "Isolated" || node.value("invert", false)) {
      fail("{}: pre_tokenizer Split must have behavior Isolated and invert false (got {})",
           path.string(), node.dump().substr(0, 300));
    }
    const std::string regex = node.contains("pattern") ? node.at("pattern").value("Regex", "") : "";
    for (SplitPattern p : {SplitPattern::kGpt2, SplitPattern::kLlama3, SplitPattern::kQwen2}) {
      if (regex == split_pattern_regex(p)) split = p;
    }
    if (!split) {
      fail(
          "{}: pre_tokenizer split pattern {} is not implemented; maxctx knows the GPT-2, "
          "Llama 3 and Qwen2 patterns",
          path.string(), json_quoted(regex));
    }
    ++at;
  }
  if (step_type(at) != "ByteLevel") refuse("no ByteLevel where expected");
  const json& byte_level = steps[at];
  if (byte_level.value("add_prefix_space", false)) {
    fail("{}: pre_tokenizer ByteLevel add_prefix_space = true is not supported", path.string());
  }
  const bool own_regex = byte_level.value("use_regex", true);
  if (split.has_value() == own_regex) {
    refuse(own_regex ? "a Split and a ByteLevel that splits again"
                     : "a ByteLevel without a split pattern");
  }
  if (at + 1 != steps.size()) refuse("a step after ByteLevel");
  out.pattern = split.value_or(SplitPattern::kGpt2);
  return out;
}

// The normalizer of a tokenizer.json: none, or NFC (alone or as a one-step Sequence; Qwen).
bool parse_normalizer(const json& root, const std::string& origin) {
  if (!root.contains("normalizer") || root.at("normalizer").is_null()) return false;
  json node = root.at("normalizer");
  if (node.is_object() && node.value("type", "") == "Sequence" && node.contains("normalizers") &&
      node.at("normalizers").is_array() && node.at("normalizers").size() == 1) {
    node = node.at("normalizers")[0];
  }
  if (node.is_object() && node.value("type", "") == "NFC") return true;
  fail("{}: tokenizer normalizer {} is not supported; maxctx implements NFC (Qwen)", origin,
       root.at("normalizer").dump().substr(0, 300));
}

// A token id of an untrusted file: a whole number in [0, 2^31 - 1]. (nlohmann's get<int32_t>
// truncates a large integer silently and converts a float such as 2.4e51 with undefined
// behaviour: found by fuzz/fuzz_tokenizer.)
int32_t parse_token_id(const json& id, const fs::path& path, std::string_view token) {
  if (!id.is_number_integer() ||
      (id.is_number_unsigned() ? id.get<uint64_t>() > uint64_t{INT32_MAX}
                               : (id.get<int64_t>() < 0 || id.get<int64_t>() > INT32_MAX))) {
    std::string shown = id.is_structured() ? std::string(id.type_name()) : id.dump();
    if (shown.size() > 40) shown = shown.substr(0, 40) + "...";
    std::string name(token.substr(0, 40));
    fail("{}: token '{}' has id {}, not a whole number in [0, {}]", path.string(), name, shown,
         INT32_MAX);
  }
  return static_cast<int32_t>(id.get<int64_t>());
}

// Standard base64 (RFC 4648, padded) of one tiktoken line; nullopt when it is not.
std::optional<std::string> decode_base64(std::string_view text) {
  const auto value = [](char c) -> int {
    if (c >= 'A' && c <= 'Z') return c - 'A';
    if (c >= 'a' && c <= 'z') return c - 'a' + 26;
    if (c >= '0' && c <= '9') return c - '0' + 52;
    if (c == '+') return 62;
    if (c == '/') return 63;
    return -1;
  };
  if (text.empty() || text.size() % 4 != 0) return std::nullopt;
  std::string out;
  for (size_t i = 0; i < text.size(); i += 4) {
    const bool last = i + 4 == text.size();
    const int pad = last ? (text[i + 3] == '=') + (text[i + 2] == '=') : 0;
    uint32_t bits = 0;
    for (int k = 0; k < 4; ++k) {
      const int v = k >= 4 - pad ? 0 : value(text[i + k]);
      if (v < 0) return std::nullopt;
      bits = (bits << 6) | static_cast<uint32_t>(v);
    }
    out += static_cast<char>(bits >> 16);
    if (pad < 2) out += static_cast<char>((bits >> 8) & 0xFF);
    if (pad < 1) out += static_cast<char>(bits & 0xFF);
  }
  return out;
}

// A token's raw bytes in the files' byte-to-unicode spelling.
std::string spelled_bytes(std::string_view bytes) {
  std::string out;
  for (const char b : bytes) unicode::append_utf8(byte_to_unicode()[static_cast<uint8_t>(b)], out);
  return out;
}

}  // namespace

const std::array<char32_t, 256>& byte_to_unicode() {
  static const std::array<char32_t, 256> table = [] {
    std::array<char32_t, 256> t{};
    char32_t next = 256;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
      t[b] = printable ? static_cast<char32_t>(b) : next++;
    }
    return t;
  }();
  return table;
}

std::optional<std::string> unicode_to_bytes(std::string_view spelled) {
  // Inverse map: code points 0..323 at most.
  static const std::vector<int> inverse = [] {
    std::vector<int> inv(512, -1);
    for (int b = 0; b < 256; ++b) inv[byte_to_unicode()[b]] = b;
    return inv;
  }();
  std::string bytes;
  for (size_t at = 0; at < spelled.size();) {
    const unicode::DecodedCodePoint d = unicode::decode_utf8(spelled, at);
    if (d.cp == unicode::kInvalid || d.cp >= inverse.size() || inverse[d.cp] < 0) {
      return std::nullopt;
    }
    bytes += static_cast<char>(inverse[d.cp]);
    at += d.length;
  }
  return bytes;
}

ByteLevelBpe::ByteLevelBpe(BpeModelSpec spec, const std::string& origin)
    : pattern_(spec.pattern),
      digits_(spec.digits),
      nfc_(spec.nfc),
      ignore_merges_(spec.ignore_merges),
      fuse_unk_(spec.fuse_unk) {
  int64_t size = 0;
  for (const auto& [token, id] : spec.vocab) size = std::max<int64_t>(size, int64_t{id} + 1);
  for (const AddedToken& t : spec.added_tokens) size = std::max<int64_t>(size, int64_t{t.id} + 1);
  if (size > std::numeric_limits<int32_t>::max()) fail("{}: token id out of range", origin);
  // The id tables are indexed by id, so a stray huge id (one line of a damaged file) would
  // allocate gigabytes. Real vocabularies number their tokens nearly densely; allow holes up to
  // as many again as there are tokens, and refuse sparser numbering by name.
  const int64_t count = static_cast<int64_t>(spec.vocab.size() + spec.added_tokens.size());
  if (size > 2 * count + 1024) {
    fail("{}: token ids are too sparse: the largest id is {} for {} tokens", origin, size - 1,
         count);
  }
  id_to_bytes_.assign(size, {});
  is_special_.assign(size, 0);
  std::vector<uint8_t> used(size, 0);
  const auto claim = [&](int32_t id, std::string_view name) {
    if (id < 0) fail("{}: token {} has the negative id {}", origin, json_quoted(name), id);
    if (used[id])
      fail("{}: id {} is given to two tokens (one is {})", origin, id, json_quoted(name));
    used[id] = 1;
  };
  for (const auto& [spelled, id] : spec.vocab) {
    std::optional<std::string> bytes = unicode_to_bytes(spelled);
    if (!bytes) {
      fail("{}: vocabulary token {} is not in the byte-level alphabet (not a byte-level BPE)",
           origin, json_quoted(spelled));
    }
    claim(id, spelled);
    id_to_bytes_[id] = *bytes;
    bytes_to_id_.insert(std::move(*bytes), id);
  }
  for (const AddedToken& t : spec.added_tokens) {
    if (t.content.empty()) fail("{}: added token {} is empty", origin, t.id);
    // An added token may repeat a vocabulary entry of the same id and text (GPT-2's
    // <|endoftext|> is in both lists); any other reuse of an id is an error.
    const bool repeats_vocab = t.id >= 0 && used[t.id] && id_to_bytes_[t.id] == t.content;
    if (!repeats_vocab) claim(t.id, t.content);
    id_to_bytes_[t.id] = t.content;
    is_special_[t.id] = t.special;
    added_.push_back(t);
  }
  std::stable_sort(added_.begin(), added_.end(), [](const AddedToken& a, const AddedToken& b) {
    return a.content.size() > b.content.size();
  });
  // The matcher's index. Of added tokens with the same content the first in added_ wins, as it
  // would in a longest-first scan; std::string orders bytes as unsigned, as the matcher does.
  added_sorted_.resize(added_.size());
  for (size_t i = 0; i < added_.size(); ++i) added_sorted_[i] = static_cast<int32_t>(i);
  std::stable_sort(added_sorted_.begin(), added_sorted_.end(),
                   [&](int32_t a, int32_t b) { return added_[a].content < added_[b].content; });
  added_sorted_.erase(
      std::unique(added_sorted_.begin(), added_sorted_.end(),
                  [&](int32_t a, int32_t b) { return added_[a].content == added_[b].content; }),
      added_sorted_.end());
  for (int b = 0; b < 256; ++b) {
    added_by_first_byte_[b + 1] = static_cast<uint32_t>(
        std::partition_point(
            added_sorted_.begin(), added_sorted_.end(),
            [&](int32_t i) { return static_cast<uint8_t>(added_[i].content[0]) <= b; }) -
        added_sorted_.begin());
  }
  // A byte without a single-byte token (SmolLM2 lacks 21 control bytes) is dropped when met, or
  // becomes unk_token: tokenizers' BPE does so for any character absent from the vocabulary.
  for (int b = 0; b < 256; ++b) byte_id_[b] = token_id(std::string(1, static_cast<char>(b)));
  if (!spec.unk_token.empty()) {
    const std::optional<std::string> bytes = unicode_to_bytes(spec.unk_token);
    unk_id_ = bytes ? token_id(*bytes) : -1;
    for (const AddedToken& t : added_) {
      if (t.content == spec.unk_token) unk_id_ = t.id;
    }
    if (unk_id_ < 0) {
      fail("{}: the unk_token {} is not in the vocabulary", origin, json_quoted(spec.unk_token));
    }
  }
  if (spec.merge_by_rank) {
    // tiktoken: a pair merges when its concatenation is a token, ranked by that token's rank.
    for (int32_t id = 0; id < static_cast<int32_t>(id_to_bytes_.size()); ++id) {
      const std::string& bytes = id_to_bytes_[id];
      if (bytes.size() < 2 || !used[id] || bytes_to_id_.find(bytes) < 0) continue;
      for (size_t k = 1; k < bytes.size(); ++k) {
        const int32_t l = token_id(std::string_view(bytes).substr(0, k));
        const int32_t r = token_id(std::string_view(bytes).substr(k));
        if (l >= 0 && r >= 0) merges_.insert(l, r, BpeMerge{id, id});
      }
    }
  }
  const auto id_of = [&](const std::string& spelled, size_t rank) {
    const std::optional<std::string> bytes = unicode_to_bytes(spelled);
    const int32_t id = bytes ? token_id(*bytes) : -1;
    if (id < 0) {
      fail("{}: merge {} names {}, which is not in the vocabulary", origin, rank,
           json_quoted(spelled));
    }
    return id;
  };
  for (size_t rank = 0; rank < spec.merges.size(); ++rank) {
    const auto& [left, right] = spec.merges[rank];
    const int32_t l = id_of(left, rank);
    const int32_t r = id_of(right, rank);
    const int32_t merged = id_of(left + right, rank);
    // A repeated merge keeps its first (lowest) rank, as the reference implementations do.
    merges_.insert(l, r, BpeMerge{static_cast<int32_t>(rank), merged});
  }
  const auto special_id = [&](const std::string& content, const char* what) {
    if (content.empty()) return int32_t{-1};
    for (const AddedToken& t : added_) {
      if (t.content == content) return t.id;
    }
    const int32_t id = token_id(content);
    if (id < 0) fail("{}: the {} token {} is not in the vocabulary", origin, what, content);
    return id;
  };
  bos_id_ = special_id(spec.bos_token, "BOS");
  eos_id_ = special_id(spec.eos_token, "EOS");
  // BOS and EOS decode to nothing even where the files list them as ordinary tokens (GPT-2).
  if (bos_id_ >= 0) is_special_[bos_id_] = 1;
  if (eos_id_ >= 0) is_special_[eos_id_] = 1;
}

int32_t ByteLevelBpe::token_id(std::string_view bytes) const { return bytes_to_id_.find(bytes); }

// A function-try-block: any field of the wrong JSON type (a "type" that is a list, found by
// fuzz_tokenizer) is one error naming the file, whichever accessor meets it.
std::unique_ptr<ByteLevelBpe> ByteLevelBpe::from_tokenizer_json(const fs::path& path) try {
  const json root = parse_json_file(path, "tokenizer.json");
  if (!root.is_object() || !root.contains("model") || !root.at("model").is_object()) {
    fail("{}: not a Hugging Face tokenizer.json (no \"model\" object)", path.string());
  }
  const json& model = root.at("model");
  const std::string origin = path.string();
  if (model.value("type", "BPE") != "BPE") {
    fail("{}: tokenizer model type '{}' is not supported; maxctx reads byte-level BPE", origin,
         model.value("type", ""));
  }
  for (const char* field : {"dropout", "continuing_subword_prefix", "end_of_word_suffix"}) {
    if (model.contains(field) && !model.at(field).is_null() &&
        !(model.at(field).is_string() && model.at(field).get<std::string>().empty())) {
      fail("{}: tokenizer model field '{}' = {} is not supported", origin, field,
           model.at(field).dump());
    }
  }
  if (model.value("byte_fallback", false)) {
    fail("{}: byte_fallback is a SentencePiece-style BPE; use the checkpoint's tokenizer.model",
         origin);
  }
  BpeModelSpec spec;
  spec.nfc = parse_normalizer(root, origin);
  const PreTokenizer pre = parse_pre_tokenizer(root.value("pre_tokenizer", json()), path);
  spec.pattern = pre.pattern;
  spec.digits = pre.digits;
  spec.ignore_merges = model.value("ignore_merges", false);
  if (model.contains("unk_token") && model.at("unk_token").is_string()) {
    spec.unk_token = model.at("unk_token").get<std::string>();
    spec.fuse_unk = model.value("fuse_unk", false);
  }
  try {
    for (const auto& [token, id] : model.at("vocab").items()) {
      spec.vocab.emplace_back(token, parse_token_id(id, path, token));
    }
    for (const json& merge : model.at("merges")) {
      if (merge.is_array() && merge.size() == 2) {
        spec.merges.emplace_back(merge[0].get<std::string>(), merge[1].get<std::string>());
        continue;
      }
      const std::string line = merge.get<std::string>();
      const size_t space = line.find(' ');
      if (space == std::string::npos || line.find(' ', space + 1) != std::string::npos) {
        fail("{}: merge {} is not two tokens separated by one space", origin, json_quoted(line));
      }
      spec.merges.emplace_back(line.substr(0, space), line.substr(space + 1));
    }
    if (root.contains("added_tokens")) {
      for (const json& t : root.at("added_tokens")) {
        for (const char* flag : {"single_word", "lstrip", "rstrip"}) {
          if (t.value(flag, false)) {
            fail("{}: added token {} has {} = true, which is not supported", origin,
                 t.at("content").dump(), flag);
          }
        }
        const std::string content = t.at("content").get<std::string>();
        spec.added_tokens.push_back(AddedToken{content, parse_token_id(t.at("id"), path, content),
                                               t.value("special", false)});
      }
    }
  } catch (const json::exception& e) {
    fail("{}: malformed vocab, merges or added_tokens ({})", origin, e.what());
  }

  // BOS/EOS: tokenizer_config.json, then the post-processor's template, then the usual names.
  const fs::path config_path = path.parent_path() / "tokenizer_config.json";
  std::error_code absent;  // a looping or dangling symlink is there: opening it says what it is
  if (fs::exists(fs::symlink_status(config_path, absent))) {
    const json config = parse_json_file(config_path, "tokenizer_config.json");
    if (config.contains("bos_token")) spec.bos_token = token_content(config.at("bos_token"));
    if (config.contains("eos_token")) spec.eos_token = token_content(config.at("eos_token"));
  }
  const json post = root.value("post_processor", json());
  if (spec.bos_token.empty() && post.is_object() &&
      post.value("type", "") == "TemplateProcessing") {
    const json single = post.value("single", json::array());
    if (!single.empty() && single[0].contains("SpecialToken")) {
      spec.bos_token = single[0].at("SpecialToken").value("id", "");
    }
  }
  const auto known = [&](std::initializer_list<const char*> names) {
    for (const char* name : names) {
      for (const AddedToken& t : spec.added_tokens) {
        if (t.content == name) return std::string(name);
      }
    }
    return std::string();
  };
  if (spec.bos_token.empty()) spec.bos_token = known({"<|begin_of_text|>", "<s>", "<|endoftext|>"});
  if (spec.eos_token.empty()) spec.eos_token = known({"<|end_of_text|>", "</s>", "<|endoftext|>"});
  return std::make_unique<ByteLevelBpe>(std::move(spec), origin);
} catch (const json::exception& e) {
  fail("{}: not a valid tokenizer.json: {}", path.string(), e.what());
}

std::unique_ptr<ByteLevelBpe> ByteLevelBpe::from_gpt2_files(const fs::path& encoder_json,
                                                            const fs::path& vocab_bpe) {
  const json encoder = parse_json_file(encoder_json, "GPT-2 encoder.json");
  if (!encoder.is_object()) fail("{}: encoder.json must map tokens to ids", encoder_json.string());
  BpeModelSpec spec;
  spec.pattern = SplitPattern::kGpt2;
  for (const auto& [token, id] : encoder.items()) {
    spec.vocab.emplace_back(token, parse_token_id(id, encoder_json, token));
  }
  std::istringstream lines(read_file(vocab_bpe, "GPT-2 vocab.bpe"));
  std::string line;
  int64_t line_number = 0;
  while (std::getline(lines, line)) {
    ++line_number;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.empty() || (line_number == 1 && line.rfind("#version", 0) == 0)) continue;
    const size_t space = line.find(' ');
    if (space == std::string::npos || line.find(' ', space + 1) != std::string::npos) {
      fail("{}:{}: a merge is two tokens separated by one space, got {}", vocab_bpe.string(),
           line_number, json_quoted(line));
    }
    spec.merges.emplace_back(line.substr(0, space), line.substr(space + 1));
  }
  for (const auto& [token, id] : spec.vocab) {
    if (token == "<|endoftext|>") spec.bos_token = spec.eos_token = token;
  }
  return std::make_unique<ByteLevelBpe>(std::move(spec), encoder_json.string());
}

std::unique_ptr<ByteLevelBpe> ByteLevelBpe::from_tiktoken(const fs::path& path) {
  std::istringstream lines(read_file(path, "tiktoken rank file"));
  BpeModelSpec spec;
  spec.pattern = SplitPattern::kLlama3;
  spec.ignore_merges = true;  // tiktoken encodes a piece that is a token as that token
  spec.merge_by_rank = true;
  std::string line;
  int64_t line_number = 0;
  while (std::getline(lines, line)) {
    ++line_number;
    if (line.empty()) continue;
    const size_t space = line.find(' ');
    std::optional<std::string> bytes =
        space == std::string::npos ? std::nullopt : decode_base64(line.substr(0, space));
    const std::string rank = space == std::string::npos ? "" : line.substr(space + 1);
    if (!bytes || rank.empty() || rank.size() > 10 ||
        rank.find_first_not_of("0123456789") != std::string::npos || std::stoll(rank) > INT32_MAX) {
      fail("{}:{}: a tiktoken line is \"<base64 token> <rank>\", got {}", path.string(),
           line_number, json(line.substr(0, 80)).dump());
    }
    spec.vocab.emplace_back(spelled_bytes(*bytes), static_cast<int32_t>(std::stoll(rank)));
  }
  if (spec.vocab.empty()) fail("{}: the tiktoken rank file holds no token", path.string());
  // MaxText's TikTokenTokenizer: 256 special tokens numbered from the number of ranks.
  const auto base = static_cast<int32_t>(spec.vocab.size());
  std::vector<std::string> specials = {"<|begin_of_text|>",
                                       "<|end_of_text|>",
                                       "<|reserved_special_token_0|>",
                                       "<|reserved_special_token_1|>",
                                       "<|reserved_special_token_2|>",
                                       "<|reserved_special_token_3|>",
                                       "<|start_header_id|>",
                                       "<|end_header_id|>",
                                       "<|reserved_special_token_4|>",
                                       "<|eot_id|>"};
  for (int i = 5; i < 256 - 5; ++i)
    specials.push_back(fmt::format("<|reserved_special_token_{}|>", i));
  for (size_t i = 0; i < specials.size(); ++i) {
    spec.added_tokens.push_back(AddedToken{specials[i], base + static_cast<int32_t>(i), true});
  }
  spec.bos_token = "<|begin_of_text|>";
  spec.eos_token = "<|end_of_text|>";
  return std::make_unique<ByteLevelBpe>(std::move(spec), path.string());
}

}  // namespace maxctx::tokenizer

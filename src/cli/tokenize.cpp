// `maxctx tokenize <tokenizer> [--bos] [--eos] [--decode] [--jsonl FILE [--column NAME]]
// [TEXT...]`: a tokenizer checked directly, without a model. Encodes each TEXT argument (or each
// line of standard input, or the `column` field of each record of a JSON Lines file) and prints one
// JSON line per input: its ids and the text they decode back to, so a user sees both directions and
// whether they round-trip. --bos / --eos add BOS first / EOS last, as training data gets them
// (add_bos, add_eos); --decode reads each TEXT as ids ("1 2 3" or "[1, 2, 3]") and prints the text.
// The tokenizer is any tokenizer_path maxctx reads (assets/<name> included). Rank 0's output only.
#include <fmt/format.h>

#include <cstdio>
#include <iostream>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "maxctx/core/check.h"
#include "maxctx/core/input_file.h"
#include "maxctx/core/log.h"
#include "maxctx/tokenizer/tokenizer.h"

namespace maxctx::cli {
namespace {

using nlohmann::json;

constexpr const char* kUsage =
    "usage: maxctx tokenize <tokenizer> [--bos] [--eos] [--decode] [--jsonl FILE "
    "[--column NAME]] [TEXT ...]";

// Ids written as "1 2 3", "1,2,3" or a JSON list.
std::vector<int32_t> parse_ids(const std::string& text) {
  std::string spaced = text;
  for (char& c : spaced) {
    if (c == ',' || c == '[' || c == ']') c = ' ';
  }
  std::vector<int32_t> ids;
  size_t at = 0;
  while ((at = spaced.find_first_not_of(" \t\n", at)) != std::string::npos) {
    const size_t end = std::min(spaced.find_first_of(" \t\n", at), spaced.size());
    const std::string word = spaced.substr(at, end - at);
    size_t used = 0;
    long long id = -1;
    try {
      id = std::stoll(word, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used != word.size() || id < 0 || id > INT32_MAX) {
      fail("tokenize --decode: '{}' is not a token id (give ids as \"1 2 3\" or [1, 2, 3])", word);
    }
    ids.push_back(static_cast<int32_t>(id));
    at = end;
  }
  return ids;
}

}  // namespace

int run_tokenize(const Args& args) {
  std::optional<std::string> path, jsonl;
  std::string column = "text";
  bool bos = false, eos = false, decode = false;
  std::vector<std::string> inputs;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    const auto value = [&] {
      if (i + 1 >= args.size()) fail("tokenize: {} needs a value; {}", a, kUsage);
      return args[++i];
    };
    if (a == "--bos") {
      bos = true;
    } else if (a == "--eos") {
      eos = true;
    } else if (a == "--decode") {
      decode = true;
    } else if (a == "--jsonl") {
      jsonl = value();
    } else if (a == "--column") {
      column = value();
    } else if (a.rfind("--", 0) == 0) {
      fail("tokenize: unknown option '{}'; {}", a, kUsage);
    } else if (!path) {
      path = a;
    } else {
      inputs.push_back(a);
    }
  }
  if (!path) fail("tokenize: no tokenizer given; {}", kUsage);
  if (jsonl && (decode || !inputs.empty())) {
    fail("tokenize: --jsonl reads its texts from the file; give no TEXT and no --decode");
  }
  const auto tok = tokenizer::load_tokenizer(*path);
  if (eos && tok->eos_id() < 0) fail("tokenize --eos: {} defines no EOS token", *path);
  const auto print = [](const json& line) {
    // A decoded text may hold bytes that are not UTF-8 (a token that is part of a character):
    // shown as U+FFFD rather than failing the line.
    const std::string text = line.dump(-1, ' ', false, json::error_handler_t::replace);
    if (log::rank() == 0) std::fputs((text + "\n").c_str(), stdout);
  };
  const auto encode = [&](const std::string& text) {
    std::vector<int32_t> ids = tok->encode(text, bos);
    if (eos) ids.push_back(tok->eos_id());
    return json{{"ids", ids}, {"decoded", tok->decode(ids)}};
  };
  if (jsonl) {
    InputFile in(*jsonl, "tokenize --jsonl file", kAnySize);
    int64_t number = 0;
    for (std::string line; in.read_line(line);) {
      ++number;
      if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
      const json record = json::parse(line, nullptr, /*allow_exceptions=*/false);
      if (!record.is_object() || !record.contains(column) || !record.at(column).is_string()) {
        fail("{}:{}: not a JSON object with a string field '{}' (--column names it)", *jsonl,
             number, column);
      }
      json out = encode(record.at(column).get<std::string>());
      out["line"] = number;
      print(out);
    }
    return 0;
  }
  if (inputs.empty()) {
    for (std::string line; std::getline(std::cin, line);) inputs.push_back(line);
  }
  for (const std::string& input : inputs) {
    if (decode) {
      const std::vector<int32_t> ids = parse_ids(input);
      print(json{{"ids", ids}, {"text", tok->decode(ids)}});
    } else {
      json out = encode(input);
      out["text"] = input;
      print(out);
    }
  }
  return 0;
}

}  // namespace maxctx::cli

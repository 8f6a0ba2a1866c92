#include "maxctx/train/text_data.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <glob.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <nlohmann/json.hpp>
#include <optional>

#include "maxctx/core/check.h"
#include "maxctx/core/input_file.h"
#include "maxctx/core/log.h"
#include "maxctx/core/progress.h"
#include "maxctx/mesh/root_task.h"
#include "maxctx/tokenizer/tokenizer.h"
#include "maxctx/train/data_first_fit.h"

namespace maxctx {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

std::string trimmed(const std::string& s) {
  const size_t begin = s.find_first_not_of(" \t");
  if (begin == std::string::npos) return {};
  return s.substr(begin, s.find_last_not_of(" \t") - begin + 1);
}

bool is_blank(std::string_view line) {
  return line.find_first_not_of(" \t\r") == std::string_view::npos;
}

// FNV-1a, 64 bits: a stable name for the cache file (not a security property).
struct Fnv1a {
  uint64_t h = 14695981039346656037ull;
  void add(std::string_view text) {
    for (const unsigned char c : text) h = (h ^ c) * 1099511628211ull;
    h = (h ^ 0xff) * 1099511628211ull;  // separator, so ("ab","c") != ("a","bc")
  }
};

std::string file_identity(const std::string& path) {
  std::error_code error;
  const auto size = fs::file_size(path, error);
  const auto time = fs::last_write_time(path, error);
  return fmt::format("{}|{}|{}", fs::absolute(path).string(), error ? 0 : size,
                     error ? 0 : time.time_since_epoch().count());
}

// The text of one line's document, or nullopt for a line to skip (blank).
std::optional<std::string_view> document_of(const TextCorpus& corpus, const std::string& file,
                                            int64_t line_number, const std::string& line,
                                            json& parsed) {
  if (is_blank(line)) return std::nullopt;
  if (corpus.format == "text") {
    std::string_view text(line);
    if (text.back() == '\r') text.remove_suffix(1);
    return text;
  }
  parsed = json::parse(line, nullptr, /*allow_exceptions=*/false);
  if (parsed.is_discarded())
    fail("{}:{}: not a JSON value (hf_path=json reads JSON Lines)", file, line_number);
  if (!parsed.is_object()) {
    fail("{}:{}: a JSON Lines record must be an object with a '{}' field", file, line_number,
         corpus.column);
  }
  const auto field = parsed.find(corpus.column);
  if (field == parsed.end()) {
    fail("{}:{}: no '{}' field (train_data_columns / eval_data_columns name the text field)", file,
         line_number, corpus.column);
  }
  if (!field->is_string()) {
    fail("{}:{}: field '{}' is a {}, not a string", file, line_number, corpus.column,
         field->type_name());
  }
  return std::string_view(field->get_ref<const std::string&>());
}

}  // namespace

std::vector<std::string> expand_data_files(const std::string& key, const std::string& spec) {
  std::vector<std::string> files;
  size_t begin = 0;
  while (begin <= spec.size()) {
    const size_t comma = std::min(spec.find(',', begin), spec.size());
    const std::string pattern = trimmed(spec.substr(begin, comma - begin));
    begin = comma + 1;
    if (pattern.empty()) continue;
    glob_t matches{};
    const int status = ::glob(pattern.c_str(), 0, nullptr, &matches);
    std::vector<std::string> found;
    if (status == 0) found.assign(matches.gl_pathv, matches.gl_pathv + matches.gl_pathc);
    ::globfree(&matches);
    std::sort(found.begin(), found.end());
    std::erase_if(found, [](const std::string& f) {
      std::error_code error;  // a symlink loop is kept: opening it says so
      return fs::is_directory(f, error);
    });
    if (found.empty()) fail("{}: '{}' matches no file", key, pattern);
    files.insert(files.end(), found.begin(), found.end());
  }
  if (files.empty()) fail("{} is empty; give a file, a glob, or several separated by commas", key);
  return files;
}

TokenizeStats tokenize_to_token_file(const TextCorpus& corpus, const std::string& path) {
  if (corpus.format != "json" && corpus.format != "text") {
    fail("hf_path = '{}' is not a local format maxctx reads; use json (JSON Lines) or text",
         corpus.format);
  }
  if (!corpus.add_eos) {
    fail("dataset_type=hf needs add_eos=true: each document ends with EOS (MaxText's pipeline)");
  }
  if (corpus.tokenizer_path.empty()) fail("dataset_type=hf needs tokenizer_path");
  const std::unique_ptr<tokenizer::Tokenizer> tok =
      tokenizer::load_tokenizer(corpus.tokenizer_path);
  TokenizeStats stats;
  stats.eos_id = tok->eos_id();
  stats.vocab_size = tok->vocab_size();
  if (stats.eos_id < 0) {
    fail("tokenizer_path {} defines no EOS token; packed documents need one",
         corpus.tokenizer_path);
  }
  const TokenWidth width = tok->vocab_size() <= 65536 ? TokenWidth::kUInt16 : TokenWidth::kUInt32;
  const std::string tmp = fmt::format("{}.tmp-{}", path, ::getpid());
  try {
    TokenFileWriter writer(tmp, static_cast<uint32_t>(stats.eos_id), width,
                           /*document_index=*/true);
    std::string line;
    json parsed;
    for (const std::string& file : corpus.files) {
      InputFile in(file, "data file", kAnySize);
      int64_t line_number = 0;
      while (in.read_line(line)) {
        ++line_number;
        const std::optional<std::string_view> text =
            document_of(corpus, file, line_number, line, parsed);
        if (!text) continue;
        std::vector<int32_t> ids = tok->encode(*text, corpus.add_bos);
        ids.push_back(stats.eos_id);
        writer.append(ids);
        writer.end_document();
        ++stats.documents;
        note_progress();  // the other ranks wait for this loop (core/progress.h)
        stats.bytes += static_cast<int64_t>(text->size());
      }
    }
    if (stats.documents == 0) {
      fail("no documents in {} (every line blank or the files empty)",
           fmt::format("{}", fmt::join(corpus.files, ", ")));
    }
    stats.tokens = static_cast<int64_t>(writer.count());
    writer.finish();
    fs::rename(tmp, path);
  } catch (...) {
    std::error_code ignored;
    fs::remove(tmp, ignored);
    throw;
  }
  return stats;
}

fs::path tokenized_cache_path(const TextCorpus& corpus, const fs::path& dir,
                              const std::string& prefix) {
  Fnv1a hash;
  hash.add(corpus.format);
  hash.add(corpus.column);
  hash.add(file_identity(corpus.tokenizer_path));
  hash.add(corpus.add_bos ? "bos" : "-");
  hash.add(corpus.add_eos ? "eos" : "-");
  for (const std::string& f : corpus.files) hash.add(file_identity(f));
  return dir / fmt::format("{}-{:016x}.tokens", prefix, hash.h);
}

TextCorpus text_corpus_from(const Config& c, bool eval) {
  const std::string key = eval ? "hf_eval_files" : "hf_train_files";
  const std::string& spec = eval ? c.hf_eval_files : c.hf_train_files;
  const StringList& columns = eval ? c.eval_data_columns : c.train_data_columns;
  if (c.hf_path.empty()) fail("dataset_type=hf needs hf_path=json (JSON Lines) or hf_path=text");
  if (spec.empty())
    fail("dataset_type=hf needs {} (a file, a glob, or a comma-separated list)", key);
  if (c.hf_path == "json" && columns.size() != 1) {
    fail("{} must name one text field (got {})", eval ? "eval_data_columns" : "train_data_columns",
         columns.size());
  }
  TextCorpus corpus;
  corpus.format = c.hf_path;
  corpus.files = expand_data_files(key, spec);
  corpus.column = columns.empty() ? "text" : columns.front();
  // Resolved here, so that the cache key names the file read (MaxText's assets/<name>).
  corpus.tokenizer_path =
      c.tokenizer_path.empty() ? "" : tokenizer::resolve_tokenizer_path(c.tokenizer_path);
  corpus.add_bos = c.add_bos;
  corpus.add_eos = c.add_eos;
  return corpus;
}

TextSource open_text_source(const TextCorpus& corpus, const fs::path& cache_dir,
                            const std::string& prefix, const Config& c, bool shuffle,
                            int64_t packing_bins, const Communicator& world) {
  const fs::path path = tokenized_cache_path(corpus, cache_dir, prefix);
  run_on_root(world, [&] {
    if (fs::exists(path)) {
      log::info("{}: reusing the tokenized corpus {}", prefix, path.string());
      return;
    }
    fs::create_directories(cache_dir);
    const TokenizeStats stats = tokenize_to_token_file(corpus, path.string());
    if (stats.vocab_size > c.vocab_size) {
      fs::remove(path);
      fail("tokenizer_path {} has {} tokens; the model's vocab_size is {}", corpus.tokenizer_path,
           stats.vocab_size, c.vocab_size);
    }
    log::info("{}: tokenized {} documents ({} bytes of text) into {} tokens: {}", prefix,
              stats.documents, stats.bytes, stats.tokens, path.string());
  });
  // Every rank reads the cache rank 0 wrote: one that opens another file (a node-local run
  // directory) or none would train on other data; its tokens and EOS against rank 0's, agreed.
  int64_t eos_id = -1;
  int64_t seen[2] = {0, 0};  // tokens, EOS id
  std::string error;
  try {
    const TokenFile tokens(path.string());
    eos_id = static_cast<int64_t>(tokens.eos_id());
    seen[0] = tokens.count();
    seen[1] = eos_id;
  } catch (const std::exception& e) {
    error = e.what();
  }
  int64_t root_seen[2] = {seen[0], seen[1]};
  world.broadcast(std::span<int64_t>(root_seen, 2), 0);
  if (error.empty() && (seen[0] != root_seen[0] || seen[1] != root_seen[1])) {
    error = fmt::format(
        "the tokenized corpus {} here holds {} tokens (EOS {}), rank 0's {} (EOS {}): the run "
        "directory must be on storage every rank sees alike",
        path.string(), seen[0], seen[1], root_seen[0], root_seen[1]);
  }
  agree_on_errors(world, error);
  TokenDataOptions options;
  options.path = path.string();
  options.vocab_size = c.vocab_size;
  options.seq_len = c.max_target_length;
  options.packing = c.packing;
  options.eos_id = eos_id;
  options.seed = static_cast<uint64_t>(c.data_shuffle_seed);
  options.shuffle = shuffle;
  if (c.packing) {
    auto packed = std::make_shared<FirstFitSource>(options, packing_bins);
    return {packed, packed->rows_per_epoch()};
  }
  auto rows = std::make_shared<TokenFileSource>(options);
  return {rows, rows->rows_per_epoch()};
}

}  // namespace maxctx

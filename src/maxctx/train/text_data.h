// dataset_type=hf: local JSON Lines or text files (MaxText's Hugging Face pipeline keys for local
// files: hf_path=json|text, hf_train_files, hf_eval_files, train_data_columns), tokenized with
// tokenizer_path and packed into training rows.
//
// One document per line: a JSON Lines line's `column` field (a string), or a text line as it is.
// Blank lines are skipped. Each document is encoded as MaxText's pipeline does: BOS first when
// add_bos, EOS last when add_eos (add_eos must be true, MaxText's default). The token file records
// where each document ends (version 2), so EOS ids inside a document (a chat transcript's
// <|im_end|> turns) do not split it: packing is per input document, as MaxText's. Tokenizing
// streams: the files are read a line at a time and the ids are appended to a
// maxctx token file (train/token_file.h), so memory never holds the corpus; the token file is then
// memory-mapped and its documents packed first-fit into rows of max_target_length as MaxText's
// pipeline packs them (train/data_first_fit.h: segment ids, per-document positions; a document
// longer than a row is cut into row-sized pieces instead of truncated), rows shuffled per epoch
// by data_shuffle_seed, each rank reading only its rows and columns, and the data position stored
// in checkpoints so a resumed run reads the same next rows.
// The token file is a cache keyed by everything that decides its bytes (the files' paths, sizes
// and modification times, the format, the column, the tokenizer file, add_bos, add_eos): a
// restarted run reuses it. It is written under a temporary name and renamed, so it is never
// half-written.
// Errors, one line each: a pattern that matches no file, an unreadable file, a line that is not
// JSON or lacks the column or holds a non-string there (file:line), a corpus with no document,
// a tokenizer whose ids do not fit the model's vocabulary.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "maxctx/config/config.h"
#include "maxctx/mesh/communicator.h"
#include "maxctx/train/data_tokens.h"

namespace maxctx {

// The files of an hf_train_files / hf_eval_files value: comma-separated paths or globs, each
// expanded in sorted order. `key` names the setting in errors.
std::vector<std::string> expand_data_files(const std::string& key, const std::string& spec);

struct TextCorpus {
  std::string format = "json";  // hf_path: json (JSON Lines) or text
  std::vector<std::string> files;
  std::string column = "text";  // json: the field holding the document
  std::string tokenizer_path;
  bool add_bos = true;
  bool add_eos = true;
};

struct TokenizeStats {
  int64_t documents = 0;
  int64_t tokens = 0;
  int64_t bytes = 0;  // text bytes tokenized
  int32_t eos_id = 0;
  int64_t vocab_size = 0;  // the tokenizer's
};

// Tokenizes `corpus` into the token file `path` (written as path + ".tmp-<pid>", then renamed).
TokenizeStats tokenize_to_token_file(const TextCorpus& corpus, const std::string& path);

// The cache file name of `corpus` under `dir`: <dir>/<prefix>-<16 hex digits>.tokens.
std::filesystem::path tokenized_cache_path(const TextCorpus& corpus,
                                           const std::filesystem::path& dir,
                                           const std::string& prefix);

// The corpus of a config: train (hf_train_files, train_data_columns) or eval (hf_eval_files,
// eval_data_columns).
TextCorpus text_corpus_from(const Config& config, bool eval);

// The rows of a text corpus: packed first-fit (packing=true; data_first_fit.h) or one document
// per row (packing=false; TokenFileSource).
struct TextSource {
  std::shared_ptr<const DataSource> source;
  int64_t rows_per_epoch = 0;
};

// Rank 0 tokenizes `corpus` into `cache_dir` unless the cache file is there; every rank then
// opens it (collective over `world`; an error on rank 0 ends every rank with it). `packing_bins`:
// the rows open at a time when packing (MaxText: the batch's rows).
TextSource open_text_source(const TextCorpus& corpus, const std::filesystem::path& cache_dir,
                            const std::string& prefix, const Config& config, bool shuffle,
                            int64_t packing_bins, const Communicator& world);

}  // namespace maxctx

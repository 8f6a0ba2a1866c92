#include "maxctx/io/golden_logits.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <iterator>
#include <limits>
#include <nlohmann/json.hpp>
#include <string_view>

#include "maxctx/core/check.h"
#include "maxctx/core/input_file.h"
#include "maxctx/core/json_checks.h"

namespace maxctx::io {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
constexpr double kInf = std::numeric_limits<double>::infinity();

// "top_k_rows", "top_k_ids" and "top_k_logits" of a line whose tokens are read.
void parse_top_k(const json& object, const std::string& where, GoldenPrompt& g) {
  for (const char* key : {"top_k_ids", "top_k_logits"}) {
    if (!object.contains(key) || !object.at(key).is_array() || object.at(key).empty()) {
      fail("{}: top-k goldens need \"top_k_ids\" and \"top_k_logits\" as non-empty lists", where);
    }
  }
  if (object.contains("top_k_rows")) {
    const json& rows = object.at("top_k_rows");
    if (!rows.is_array()) fail("{}: \"top_k_rows\" must be a list of row indices", where);
    for (const json& r : rows) {
      if (!r.is_number_integer() || r.get<int64_t>() < 0 || r.get<int64_t>() >= g.seq() ||
          (!g.top_k_rows.empty() && r.get<int64_t>() <= g.top_k_rows.back())) {
        fail("{}: top_k_rows holds {}; rows are ascending indices below the {} tokens", where,
             r.dump(), g.seq());
      }
      g.top_k_rows.push_back(r.get<int64_t>());
    }
  } else {
    for (int64_t t = 0; t < g.seq(); ++t) g.top_k_rows.push_back(t);
  }
  const json& ids = object.at("top_k_ids");
  const json& logits = object.at("top_k_logits");
  if (ids.size() != g.top_k_rows.size() || logits.size() != g.top_k_rows.size()) {
    fail(
        "{}: {} rows of top_k_ids and {} of top_k_logits for {} rows (top_k_rows, or one per "
        "token)",
        where, ids.size(), logits.size(), g.top_k_rows.size());
  }
  for (size_t r = 0; r < ids.size(); ++r) {
    const json& id_row = ids[r];
    const json& logit_row = logits[r];
    if (!id_row.is_array() || id_row.empty() || !logit_row.is_array() ||
        logit_row.size() != id_row.size()) {
      fail("{}: top-k row {} must be two lists of the same, non-zero length", where, r);
    }
    if (r == 0) g.top_k = static_cast<int64_t>(id_row.size());
    if (static_cast<int64_t>(id_row.size()) != g.top_k) {
      fail("{}: top-k row {} has {} ids, row 0 has {}", where, r, id_row.size(), g.top_k);
    }
    const size_t begin = g.top_k_ids.size();
    for (size_t k = 0; k < id_row.size(); ++k) {
      const json& id = id_row[k];
      const json& value = logit_row[k];
      if (!id.is_number_integer() || id.get<int64_t>() < 0 ||
          id.get<int64_t>() > std::numeric_limits<int32_t>::max()) {
        fail("{}: top-k row {} holds {}, not a token id", where, r, id.dump());
      }
      if (!value.is_number() || !std::isfinite(value.get<double>())) {
        fail("{}: top-k row {} holds {}, not a finite logit", where, r, value.dump());
      }
      const auto id32 = id.get<int32_t>();
      if (std::find(g.top_k_ids.begin() + static_cast<std::ptrdiff_t>(begin), g.top_k_ids.end(),
                    id32) != g.top_k_ids.end()) {
        fail("{}: top-k row {} holds id {} twice", where, r, id32);
      }
      if (k > 0 && value.get<float>() > g.top_k_logits.back()) {
        fail("{}: top-k row {} is not highest first ({} after {})", where, r, value.get<float>(),
             g.top_k_logits.back());
      }
      g.top_k_ids.push_back(id32);
      g.top_k_logits.push_back(value.get<float>());
    }
  }
}

GoldenPrompt parse_line(const std::string& line, const fs::path& path, int64_t line_number) {
  const std::string where = fmt::format("{}:{}", path.string(), line_number);
  if (const JsonCheck check = check_json(line); check.too_deep) {
    fail("{}: the line is {}", where, *check.error);
  }
  json object;
  try {
    object = json::parse(line);
  } catch (const json::exception& e) {
    fail("{}: not a JSON object ({})", where, e.what());
  }
  if (!object.is_object()) fail("{}: each line must be a JSON object", where);
  const bool top_k = object.contains("top_k_ids") || object.contains("top_k_logits");
  for (const char* key : {"tokens", "logits"}) {
    if (top_k && std::string_view(key) == "logits" && !object.contains(key)) continue;
    if (!object.contains(key) || !object.at(key).is_array()) {
      fail("{}: needs \"{}\" as a list (MaxText's format: prompt, tokens, logits)", where, key);
    }
  }
  GoldenPrompt g;
  if (object.contains("prompt")) {
    if (!object.at("prompt").is_string()) fail("{}: \"prompt\" must be a string", where);
    g.prompt = object.at("prompt").get<std::string>();
  }
  for (const json& t : object.at("tokens")) {
    if (!t.is_number_integer() || t.get<int64_t>() < 0 ||
        t.get<int64_t>() > std::numeric_limits<int32_t>::max()) {
      fail("{}: token {} is not a token id", where, t.dump());
    }
    g.tokens.push_back(t.get<int32_t>());
  }
  if (g.tokens.empty()) fail("{}: \"tokens\" is empty", where);
  if (top_k) parse_top_k(object, where, g);
  if (!object.contains("logits")) return g;
  const json& rows = object.at("logits");
  if (static_cast<int64_t>(rows.size()) != g.seq()) {
    fail("{}: {} rows of logits for {} tokens; there must be one row per token", where, rows.size(),
         g.seq());
  }
  for (size_t t = 0; t < rows.size(); ++t) {
    const json& row = rows[t];
    if (!row.is_array() || row.empty()) fail("{}: logits row {} is not a non-empty list", where, t);
    if (t == 0) g.vocab = static_cast<int64_t>(row.size());
    if (static_cast<int64_t>(row.size()) != g.vocab) {
      fail("{}: logits row {} has {} values, row 0 has {}", where, t, row.size(), g.vocab);
    }
    for (const json& value : row) {
      if (!value.is_number()) {
        fail("{}: logits row {} holds {}, not a number", where, t, value.dump());
      }
      g.logits.push_back(value.get<float>());
    }
  }
  return g;
}

// The shortest text that reads back as the same float; integral values get ".0" so that JSON
// readers take them as floats (nlohmann reads "-0" as the integer 0 and loses the sign).
void append_float(float value, std::string& out) {
  if (!std::isfinite(value)) fail("golden logits must be finite, got {}", value);
  const size_t start = out.size();
  fmt::format_to(std::back_inserter(out), "{}", value);
  if (out.find_first_of(".e", start) == std::string::npos) out += ".0";
}

}  // namespace

std::vector<GoldenPrompt> read_golden_logits(const fs::path& path) {
  InputFile in(path, "golden_logits_path", kAnySize);
  std::vector<GoldenPrompt> prompts;
  std::string line;
  for (int64_t line_number = 1; in.read_line(line); ++line_number) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    prompts.push_back(parse_line(line, path, line_number));
  }
  if (prompts.empty()) fail("golden_logits_path {}: the file holds no prompts", path.string());
  return prompts;
}

void write_golden_logits(const fs::path& path, std::span<const GoldenPrompt> prompts) {
  std::string text;
  for (const GoldenPrompt& g : prompts) {
    MAXCTX_CHECK_EQ(static_cast<int64_t>(g.logits.size()), g.seq() * g.vocab,
                    "logits must be (seq, vocab)");
    text += fmt::format(R"({{"prompt": {}, "tokens": [{}], "logits": [)", json(g.prompt).dump(),
                        fmt::join(g.tokens, ", "));
    for (int64_t t = 0; t < g.seq(); ++t) {
      text += t == 0 ? "[" : ", [";
      for (int64_t v = 0; v < g.vocab; ++v) {
        if (v > 0) text += ',';
        append_float(g.logits[t * g.vocab + v], text);
      }
      text += ']';
    }
    text += "]}\n";
  }
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!(out << text) || !out.flush()) fail("{}: cannot write the golden logits", path.string());
}

double kl_divergence_of_logits(std::span<const float> golden, std::span<const float> model) {
  MAXCTX_CHECK_EQ(golden.size(), model.size(), "one row of logits each");
  const auto log_sum_exp = [](std::span<const float> x) {
    double max = -kInf;
    for (const float v : x) max = std::max(max, double(v));
    double sum = 0.0;
    for (const float v : x) sum += std::exp(double(v) - max);
    return max + std::log(sum);
  };
  const double lse_golden = log_sum_exp(golden);
  const double lse_model = log_sum_exp(model);
  double kl = 0.0;
  for (size_t v = 0; v < golden.size(); ++v) {
    const double log_p = double(golden[v]) - lse_golden;
    const double log_q = double(model[v]) - lse_model;
    kl += std::exp(log_p) * (log_p - log_q);
  }
  // Rounding can leave a tiny negative sum for equal distributions; KL itself is >= 0.
  return std::isnan(kl) ? kl : std::max(kl, 0.0);
}

LogitComparison compare_logits(std::span<const float> golden, std::span<const float> model,
                               int64_t seq, int64_t vocab, double atol, double rtol) {
  MAXCTX_CHECK_EQ(static_cast<int64_t>(golden.size()), seq * vocab, "golden is (seq, vocab)");
  MAXCTX_CHECK_EQ(static_cast<int64_t>(model.size()), seq * vocab, "model is (seq, vocab)");
  LogitComparison c;
  c.tokens = seq;
  c.logits = seq * vocab;
  double worst_excess = -kInf;
  for (int64_t t = 0; t < seq; ++t) {
    const std::span<const float> g = golden.subspan(t * vocab, vocab);
    const std::span<const float> m = model.subspan(t * vocab, vocab);
    for (int64_t v = 0; v < vocab; ++v) {
      const double diff = std::fabs(double(m[v]) - double(g[v]));
      const double excess = diff - (atol + rtol * std::fabs(double(g[v])));
      c.max_abs_diff = std::max(c.max_abs_diff, std::isnan(diff) ? kInf : diff);
      if (!(excess <= 0.0)) {  // written so that NaN is outside
        ++c.num_outside;
        const double key = std::isnan(excess) ? kInf : excess;
        if (key > worst_excess) {
          worst_excess = key;
          c.worst_token = t;
          c.worst_vocab = v;
          c.worst_model = m[v];
          c.worst_golden = g[v];
        }
      }
    }
    const double kl = kl_divergence_of_logits(g, m);
    if (std::isnan(kl) || kl > c.max_kl) {
      c.max_kl = std::isnan(kl) ? kInf : kl;
      c.max_kl_token = t;
    }
  }
  return c;
}

TopKComparison compare_top_k(const GoldenPrompt& g, std::span<const float> model, int64_t vocab,
                             double atol, double rtol) {
  MAXCTX_CHECK_EQ(static_cast<int64_t>(model.size()), g.seq() * vocab, "model is (seq, vocab)");
  const auto tol = [&](double golden) { return atol + rtol * std::fabs(golden); };
  TopKComparison c;
  const auto K = static_cast<size_t>(g.top_k);
  for (size_t r = 0; r < g.top_k_rows.size(); ++r) {
    const int64_t t = g.top_k_rows[r];
    const std::span<const float> row =
        model.subspan(static_cast<size_t>(t * vocab), static_cast<size_t>(vocab));
    const std::span<const int32_t> ids(g.top_k_ids.data() + r * K, K);
    const std::span<const float> golden(g.top_k_logits.data() + r * K, K);
    std::string why;
    for (size_t k = 0; k < K; ++k) {
      MAXCTX_CHECK(ids[k] < vocab, "golden id {} below the vocabulary {}", ids[k], vocab);
      const double diff = std::fabs(double(row[ids[k]]) - double(golden[k]));
      c.max_abs_diff = std::max(c.max_abs_diff, std::isnan(diff) ? kInf : diff);
      if (why.empty() && !(diff <= tol(golden[k]))) {
        why = fmt::format("golden id {} (rank {}) has logit {} in the model, {} in the golden",
                          ids[k], k + 1, row[ids[k]], golden[k]);
      }
    }
    // The model's own top k, for the message and for intruders above the K-th golden logit.
    std::vector<int32_t> order(static_cast<size_t>(vocab));
    for (int32_t v = 0; v < static_cast<int32_t>(vocab); ++v) order[static_cast<size_t>(v)] = v;
    const size_t shown = std::min<size_t>(K + 1, order.size());
    std::partial_sort(order.begin(), order.begin() + static_cast<std::ptrdiff_t>(shown),
                      order.end(), [&](int32_t a, int32_t b) {
                        const float x = row[a], y = row[b];  // NaN first: it fails below
                        if (std::isnan(x) != std::isnan(y)) return std::isnan(x);
                        return x > y || (x == y && a < b);
                      });
    const double bound = double(golden[K - 1]) + tol(golden[K - 1]);
    for (size_t i = 0; i < shown && why.empty(); ++i) {
      const int32_t v = order[i];
      if (std::find(ids.begin(), ids.end(), v) != ids.end()) continue;
      if (!(double(row[v]) <= bound)) {
        why = fmt::format(
            "id {} has logit {} in the model, above the golden's k-th logit {} + tolerance, but "
            "is not among the golden's top {}",
            v, row[v], golden[K - 1], K);
      }
    }
    ++c.rows;
    if (why.empty()) continue;
    if (c.num_failed++ == 0) {
      order.resize(std::min(K, order.size()));
      c.first_failure = fmt::format("row {}: {} (model top {}: [{}], golden: [{}])", t, why, K,
                                    fmt::join(order, ", "), fmt::join(ids, ", "));
    }
  }
  return c;
}

}  // namespace maxctx::io

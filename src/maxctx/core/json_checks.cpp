#include "maxctx/core/json_checks.h"

#include <fmt/format.h>

#include <nlohmann/json.hpp>
#include <unordered_set>

namespace maxctx {
namespace {

using nlohmann::json;

// nlohmann's SAX interface: counts depth, remembers top-level keys; returning false stops.
class Checker {
 public:
  bool null() { return true; }
  bool boolean(bool) { return true; }
  bool number_integer(json::number_integer_t) { return true; }
  bool number_unsigned(json::number_unsigned_t) { return true; }
  bool number_float(json::number_float_t, const json::string_t&) { return true; }
  bool string(json::string_t&) { return true; }
  bool binary(json::binary_t&) { return true; }
  bool start_object(std::size_t) { return enter(); }
  bool end_object() { return leave(); }
  bool start_array(std::size_t) { return enter(); }
  bool end_array() { return leave(); }
  bool key(json::string_t& name) {
    if (depth_ == 1 && !result.duplicate_top_key && !top_keys_.insert(name).second) {
      result.duplicate_top_key = name;
    }
    return true;
  }
  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception& e) {
    result.error = fmt::format("not valid JSON ({})", e.what());
    return false;
  }

  JsonCheck result;

 private:
  bool enter() {
    if (++depth_ <= kMaxJsonDepth) return true;
    result.error = fmt::format("nested deeper than {} levels", kMaxJsonDepth);
    result.too_deep = true;
    return false;
  }
  bool leave() {
    --depth_;
    return true;
  }

  int depth_ = 0;
  std::unordered_set<std::string> top_keys_;
};

}  // namespace

JsonCheck check_json(std::string_view text) {
  Checker checker;
  json::sax_parse(text.begin(), text.end(), &checker);
  return checker.result;
}

}  // namespace maxctx

#include "maxctx/config/values.h"

#include <fmt/format.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <vector>

#include "maxctx/core/check.h"

namespace maxctx::config_values {
namespace {

std::string scalar_of(const YAML::Node& node, std::string_view key, std::string_view where,
                      std::string_view expected) {
  if (!node.IsScalar()) {
    fail("config key '{}' {}: expected {}, got a {}", key, where, expected,
         node.IsSequence() ? "list"
         : node.IsMap()    ? "mapping"
                           : "null value");
  }
  return node.Scalar();
}

bool parse_int_text(std::string text, int64_t& out) {
  // YAML 1.1 (and MaxText's base.yml) writes 150_001; accept the digit separator.
  text.erase(std::remove(text.begin(), text.end(), '_'), text.end());
  if (text.empty()) return false;
  const char* begin = text.data();
  if (*begin == '+') ++begin;
  const auto [end, error] = std::from_chars(begin, text.data() + text.size(), out);
  return error == std::errc() && end == text.data() + text.size();
}

bool parse_float_text(std::string text, double& out) {
  text.erase(std::remove(text.begin(), text.end(), '_'), text.end());
  if (text.empty()) return false;
  char* end = nullptr;
  out = std::strtod(text.c_str(), &end);
  return end == text.c_str() + text.size() && std::isfinite(out);
}

}  // namespace

void parse(const YAML::Node& node, bool& out, std::string_view key, std::string_view where) {
  std::string text = scalar_of(node, key, where, "true or false");
  std::transform(text.begin(), text.end(), text.begin(),
                 [](unsigned char c) { return std::tolower(c); });
  if (text == "true" || text == "1") {
    out = true;
  } else if (text == "false" || text == "0") {
    out = false;
  } else {
    fail("config key '{}' {}: '{}' is not a boolean; use true or false", key, where, node.Scalar());
  }
}

void parse(const YAML::Node& node, int64_t& out, std::string_view key, std::string_view where) {
  const std::string text = scalar_of(node, key, where, "an integer");
  if (!parse_int_text(text, out)) {
    fail("config key '{}' {}: '{}' is not an integer; use a whole number such as 2048", key, where,
         text);
  }
}

void parse(const YAML::Node& node, double& out, std::string_view key, std::string_view where) {
  const std::string text = scalar_of(node, key, where, "a number");
  if (!parse_float_text(text, out)) {
    fail("config key '{}' {}: '{}' is not a number; use a decimal such as 0.5 or 1e-5", key, where,
         text);
  }
}

void parse(const YAML::Node& node, std::string& out, std::string_view key, std::string_view where) {
  if (node.IsNull()) {
    out.clear();
    return;
  }
  out = scalar_of(node, key, where, "a string");
}

void parse(const YAML::Node& node, IntList& out, std::string_view key, std::string_view where) {
  if (!node.IsSequence()) {
    fail("config key '{}' {}: expected a list of integers such as [1, 2]", key, where);
  }
  out.clear();
  for (const YAML::Node& item : node) {
    int64_t value = 0;
    parse(item, value, key, where);
    out.push_back(value);
  }
}

void parse(const YAML::Node& node, StringList& out, std::string_view key, std::string_view where) {
  if (!node.IsSequence()) {
    fail("config key '{}' {}: expected a list of strings such as [a, b]", key, where);
  }
  out.clear();
  for (const YAML::Node& item : node) out.push_back(scalar_of(item, key, where, "a string"));
}

void parse(const YAML::Node& node, AxisRules& out, std::string_view key, std::string_view where) {
  const auto refuse = [&] {
    fail(
        "config key '{}' {}: expected a list of [logical axis, mesh axes] pairs such as "
        "[[norm, fsdp], [embed, [fsdp, tensor]], [heads, null]]",
        key, where);
  };
  if (!node.IsSequence()) refuse();
  out.clear();
  for (const YAML::Node& rule : node) {
    if (!rule.IsSequence() || rule.size() != 2 || !rule[0].IsScalar()) refuse();
    StringList axes;
    if (rule[1].IsScalar()) {
      axes.push_back(rule[1].Scalar());
    } else if (rule[1].IsSequence()) {
      for (const YAML::Node& axis : rule[1]) axes.push_back(scalar_of(axis, key, where, "a name"));
    } else if (!rule[1].IsNull()) {
      refuse();
    }
    out.emplace_back(rule[0].Scalar(), std::move(axes));
  }
}

std::string format(bool value) { return value ? "true" : "false"; }
std::string format(int64_t value) { return fmt::format("{}", value); }
std::string format(double value) { return fmt::format("{}", value); }
std::string format(const std::string& value) { return value.empty() ? "''" : value; }
std::string format(const IntList& value) { return fmt::format("[{}]", fmt::join(value, ", ")); }
std::string format(const StringList& value) { return fmt::format("[{}]", fmt::join(value, ", ")); }
std::string format(const AxisRules& value) {
  std::vector<std::string> rules;
  for (const auto& [name, axes] : value)
    rules.push_back(fmt::format("[{}, {}]", name, format(axes)));
  return fmt::format("[{}]", fmt::join(rules, ", "));
}

}  // namespace maxctx::config_values

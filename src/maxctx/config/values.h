// Parsing and printing of config values, one overload per key type.
//
// Text comes from YAML scalars, YAML sequences and key=value arguments; each parse either fills
// the value or throws maxctx::Error saying which key, where it came from, and what is allowed.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "maxctx/config/keys.h"

namespace YAML {
class Node;
}

namespace maxctx::config_values {

// `where` reads like "in configs/base.yml" or "on the command line".
void parse(const YAML::Node& node, bool& out, std::string_view key, std::string_view where);
void parse(const YAML::Node& node, int64_t& out, std::string_view key, std::string_view where);
void parse(const YAML::Node& node, double& out, std::string_view key, std::string_view where);
void parse(const YAML::Node& node, std::string& out, std::string_view key, std::string_view where);
void parse(const YAML::Node& node, IntList& out, std::string_view key, std::string_view where);
void parse(const YAML::Node& node, StringList& out, std::string_view key, std::string_view where);
void parse(const YAML::Node& node, AxisRules& out, std::string_view key, std::string_view where);

std::string format(bool value);
std::string format(int64_t value);
std::string format(double value);
std::string format(const std::string& value);
std::string format(const IntList& value);
std::string format(const StringList& value);
std::string format(const AxisRules& value);

}  // namespace maxctx::config_values

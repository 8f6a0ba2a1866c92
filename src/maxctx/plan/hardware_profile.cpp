#include "maxctx/plan/hardware_profile.h"

#include <fmt/format.h>
#include <yaml-cpp/yaml.h>

#include <cmath>
#include <filesystem>

#include "maxctx/core/check.h"
#include "maxctx/core/input_file.h"

namespace maxctx::plan {
namespace {

double number_at(const YAML::Node& node, const std::string& key, const std::string& file) {
  const YAML::Node value = node[key];
  if (!value) fail("hardware profile {}: key '{}' is missing", file, key);
  try {
    return value.as<double>();
  } catch (const YAML::Exception&) {
    fail("hardware profile {}: '{}' = '{}' is not a number", file, key, value.Scalar());
  }
}

double positive_number(const YAML::Node& node, const std::string& key, const std::string& file) {
  const double number = number_at(node, key, file);
  if (!(number > 0)) fail("hardware profile {}: '{}' = {} must be positive", file, key, number);
  return number;
}

LinkSpeed link_of(const YAML::Node& root, const std::string& tier, const std::string& file) {
  const YAML::Node node = root[tier];
  if (!node || !node.IsMap()) {
    fail("hardware profile {}: '{}' (bandwidth, latency) is missing", file, tier);
  }
  return {positive_number(node, "bandwidth", file), positive_number(node, "latency", file)};
}

// `key: {size: rate, ...}` per kind, every size and rate positive.
std::map<std::string, std::map<int64_t, double>> rate_tables(const YAML::Node& root,
                                                             const std::string& key,
                                                             const std::string& file) {
  std::map<std::string, std::map<int64_t, double>> tables;
  const YAML::Node node = root[key];
  if (!node) return tables;
  if (!node.IsMap())
    fail("hardware profile {}: '{}' must map a dtype to {{size: rate}}", file, key);
  for (const auto& kind : node) {
    const std::string name = kind.first.as<std::string>();
    if (!kind.second.IsMap() || kind.second.size() == 0) {
      fail("hardware profile {}: '{}: {}' must map sizes to rates", file, key, name);
    }
    for (const auto& entry : kind.second) {
      int64_t size = 0;
      try {
        size = entry.first.as<int64_t>();
      } catch (const YAML::Exception&) {
        fail("hardware profile {}: '{}: {}' has a size '{}' that is not an integer", file, key,
             name, entry.first.Scalar());
      }
      if (size <= 0)
        fail("hardware profile {}: '{}: {}' size {} must be positive", file, key, name, size);
      tables[name][size] = positive_number(kind.second, entry.first.Scalar(), file);
    }
  }
  return tables;
}

// `key: {name: positive number, ...}`, or nothing when the key is absent.
std::map<std::string, double> named_numbers(const YAML::Node& root, const std::string& key,
                                            const std::string& file) {
  std::map<std::string, double> numbers;
  const YAML::Node node = root[key];
  if (!node) return numbers;
  if (!node.IsMap()) fail("hardware profile {}: '{}' must map names to numbers", file, key);
  for (const auto& entry : node) {
    const std::string name = entry.first.as<std::string>();
    numbers[name] = positive_number(node, name, file);
  }
  return numbers;
}

// The table's rate at `size`: linear in log2(size) between its entries, flat beyond them.
double interpolated(const std::map<int64_t, double>& table, int64_t size) {
  const auto above = table.lower_bound(size);
  if (above == table.end()) return std::prev(above)->second;
  if (above->first == size || above == table.begin()) return above->second;
  const auto below = std::prev(above);
  const double t = (std::log2(double(size)) - std::log2(double(below->first))) /
                   (std::log2(double(above->first)) - std::log2(double(below->first)));
  return below->second + t * (above->second - below->second);
}

std::string format_tables(const std::map<std::string, std::map<int64_t, double>>& tables) {
  std::string out;
  for (const auto& [kind, table] : tables) {
    out += fmt::format("  {}: {{", kind);
    const char* sep = "";
    for (const auto& [size, rate] : table) {
      out += fmt::format("{}{}: {:.4g}", sep, size, rate);
      sep = ", ";
    }
    out += "}\n";
  }
  return out;
}

}  // namespace

double HardwareProfile::matmul_rate(std::string_view kind, int64_t smallest) const {
  const auto it = matmul_by_size.find(std::string(kind));
  if (it != matmul_by_size.end()) return interpolated(it->second, smallest);
  if (kind.ends_with("_backward")) return backward_flops(kind.substr(0, kind.size() - 9));
  return flops(kind);
}

double HardwareProfile::attention_rate(std::string_view dtype, int64_t head_dim) const {
  const auto it = attention_by_head_dim.find(std::string(dtype));
  if (it != attention_by_head_dim.end()) return interpolated(it->second, head_dim);
  return flops(dtype) * attention_fraction;
}

double HardwareProfile::vector_seconds(const std::string& op, double elements,
                                       double bytes_per_element) const {
  const auto it = vector_rates.find(op);
  if (it != vector_rates.end()) return elements / it->second;
  return elements * bytes_per_element / memory_bandwidth;
}

double HardwareProfile::flops(std::string_view dtype) const {
  if (dtype == "bfloat16") return flops_bf16;
  if (dtype == "int8") return flops_int8;
  return flops_f32;
}

double HardwareProfile::backward_flops(std::string_view dtype) const {
  return dtype == "bfloat16" ? flops_bf16_backward : flops(dtype);
}

HardwareProfile load_hardware_profile(const std::string& name_or_path,
                                      const std::string& config_dir) {
  const bool is_path = name_or_path.find('/') != std::string::npos ||
                       name_or_path.ends_with(".yml") || name_or_path.ends_with(".yaml");
  const std::filesystem::path file =
      is_path ? std::filesystem::path(name_or_path)
              : std::filesystem::path(config_dir) / "hardware" / (name_or_path + ".yml");
  if (!std::filesystem::is_regular_file(file)) {
    fail(
        "hardware profile '{}': no file {} (profiles are configs/hardware/<name>.yml, or give a "
        "path; `maxctx probe-hardware` writes one for this machine)",
        name_or_path, file.string());
  }
  YAML::Node root;
  try {
    root = YAML::Load(read_input_file(file, "hardware profile", 16 * kMiB));
  } catch (const YAML::Exception& e) {
    fail("hardware profile {}: {}", file.string(), e.what());
  }
  const std::string where = file.string();
  HardwareProfile p;
  p.name = root["name"] ? root["name"].as<std::string>() : file.stem().string();
  p.source = root["source"] ? root["source"].as<std::string>() : "";
  p.memory_bytes = positive_number(root, "memory_bytes", where);
  p.memory_bandwidth = positive_number(root, "memory_bandwidth", where);
  if (root["runtime_bytes"]) {  // 0: no figure (what such a profile writes back)
    p.runtime_bytes = number_at(root, "runtime_bytes", where);
    if (!(p.runtime_bytes >= 0)) {
      fail("hardware profile {}: 'runtime_bytes' = {} must not be negative", where,
           p.runtime_bytes);
    }
  }
  const YAML::Node flops = root["flops"];
  if (!flops || !flops.IsMap())
    fail("hardware profile {}: 'flops' (float32, bfloat16, int8) is missing", where);
  p.flops_f32 = positive_number(flops, "float32", where);
  p.flops_bf16 = positive_number(flops, "bfloat16", where);
  p.flops_int8 = positive_number(flops, "int8", where);
  p.flops_bf16_backward = flops["bfloat16_backward"]
                              ? positive_number(flops, "bfloat16_backward", where)
                              : p.flops_bf16;
  if (root["attention_fraction"]) {
    p.attention_fraction = positive_number(root, "attention_fraction", where);
    if (p.attention_fraction > 1) {
      fail("hardware profile {}: attention_fraction = {} must be in (0, 1]", where,
           p.attention_fraction);
    }
  }
  p.ici = link_of(root, "ici", where);
  p.dcn = link_of(root, "dcn", where);
  if (root["cache_bytes"]) p.cache_bytes = positive_number(root, "cache_bytes", where);
  if (root["host_memory"]) {
    try {
      p.host_memory = root["host_memory"].as<bool>();
    } catch (const YAML::Exception&) {
      fail("hardware profile {}: 'host_memory' must be true or false", where);
    }
  }
  p.matmul_by_size = rate_tables(root, "matmul_by_size", where);
  p.attention_by_head_dim = rate_tables(root, "attention_by_head_dim", where);
  p.vector_rates = named_numbers(root, "vector_rates", where);
  p.call_seconds = named_numbers(root, "call_seconds", where);
  return p;
}

std::string format_hardware_profile(const HardwareProfile& p) {
  std::string detail;
  if (p.host_memory) {
    detail += "host_memory: true  # the device's memory is the host's (host staging counts)\n";
  }
  if (p.cache_bytes > 0) {
    detail += fmt::format(
        "cache_bytes: {:.6g}  # last-level cache per device (the CPU's over the ranks sharing "
        "it)\n",
        p.cache_bytes);
  }
  if (!p.matmul_by_size.empty()) {
    detail +=
        "matmul_by_size:  # FLOP/s by the smallest dimension: (2048, d) x (d, 2d) by d; "
        "_decode: (4, d) x (d, 2d) by d, net of call_seconds, weights cold (_cached: "
        "resident)\n" +
        format_tables(p.matmul_by_size);
  }
  if (!p.attention_by_head_dim.empty()) {
    detail +=
        "attention_by_head_dim:  # FLOP/s by head_dim: causal forward + backward; _forward: "
        "causal forward; _decode: single queries over a cache, cold (_cached: resident)\n" +
        format_tables(p.attention_by_head_dim);
  }
  if (!p.vector_rates.empty()) {
    detail +=
        "vector_rates:  # elements/s of the vector kernels, forward + backward (_forward, "
        "quantize_*: forward alone)\n";
    for (const auto& [op, rate] : p.vector_rates) detail += fmt::format("  {}: {:.4g}\n", op, rate);
  }
  if (!p.call_seconds.empty()) {
    detail += "call_seconds:  # the fixed cost of one call of a decode step's small kernels\n";
    for (const auto& [kind, seconds] : p.call_seconds) {
      detail += fmt::format("  {}: {:.4g}\n", kind, seconds);
    }
  }
  return fmt::format(
             "name: {}\nsource: \"{}\"\nmemory_bytes: {:.6g}\nruntime_bytes: {:.6g}\n"
             "memory_bandwidth: {:.6g}  # bytes/s\n"
             "flops:  # dense matmul FLOP/s by input dtype\n  float32: {:.6g}\n  bfloat16: {:.6g}\n"
             "  int8: {:.6g}\n  bfloat16_backward: {:.6g}  # f32 gradients x bf16 operands\n"
             "attention_fraction: {:.4g}  # attention FLOP/s / matmul FLOP/s\n"
             "ici:  # inside a node: bytes/s per device, seconds per collective\n"
             "  bandwidth: {:.6g}\n  latency: {:.6g}\ndcn:\n  bandwidth: {:.6g}\n  latency: "
             "{:.6g}\n",
             p.name, p.source, p.memory_bytes, p.runtime_bytes, p.memory_bandwidth, p.flops_f32,
             p.flops_bf16, p.flops_int8, p.flops_bf16_backward, p.attention_fraction,
             p.ici.bandwidth, p.ici.latency, p.dcn.bandwidth, p.dcn.latency) +
         detail;
}

}  // namespace maxctx::plan

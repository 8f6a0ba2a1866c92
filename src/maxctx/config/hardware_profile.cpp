#include "maxctx/config/hardware_profile.h"

#include <fmt/format.h>
#include <yaml-cpp/yaml.h>

#include <filesystem>

#include "maxctx/core/check.h"

namespace maxctx {
namespace {

double positive_number(const YAML::Node& node, const std::string& key, const std::string& file) {
  const YAML::Node value = node[key];
  if (!value) fail("hardware profile {}: key '{}' is missing", file, key);
  double number = 0;
  try {
    number = value.as<double>();
  } catch (const YAML::Exception&) {
    fail("hardware profile {}: '{}' = '{}' is not a number", file, key, value.Scalar());
  }
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

}  // namespace

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
    root = YAML::LoadFile(file.string());
  } catch (const YAML::Exception& e) {
    fail("hardware profile {}: {}", file.string(), e.what());
  }
  const std::string where = file.string();
  HardwareProfile p;
  p.name = root["name"] ? root["name"].as<std::string>() : file.stem().string();
  p.source = root["source"] ? root["source"].as<std::string>() : "";
  p.memory_bytes = positive_number(root, "memory_bytes", where);
  p.memory_bandwidth = positive_number(root, "memory_bandwidth", where);
  if (root["runtime_bytes"]) p.runtime_bytes = positive_number(root, "runtime_bytes", where);
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
  return p;
}

std::string format_hardware_profile(const HardwareProfile& p) {
  return fmt::format(
      "name: {}\nsource: \"{}\"\nmemory_bytes: {:.6g}\nruntime_bytes: {:.6g}\n"
      "memory_bandwidth: {:.6g}  # bytes/s\n"
      "flops:  # dense matmul FLOP/s by input dtype\n  float32: {:.6g}\n  bfloat16: {:.6g}\n"
      "  int8: {:.6g}\n  bfloat16_backward: {:.6g}  # f32 gradients x bf16 operands\n"
      "attention_fraction: {:.4g}  # attention FLOP/s / matmul FLOP/s\n"
      "ici:  # inside a node: bytes/s per device, seconds per collective\n"
      "  bandwidth: {:.6g}\n  latency: {:.6g}\ndcn:\n  bandwidth: {:.6g}\n  latency: {:.6g}\n",
      p.name, p.source, p.memory_bytes, p.runtime_bytes, p.memory_bandwidth, p.flops_f32,
      p.flops_bf16, p.flops_int8, p.flops_bf16_backward, p.attention_fraction, p.ici.bandwidth,
      p.ici.latency, p.dcn.bandwidth, p.dcn.latency);
}

}  // namespace maxctx

// `maxctx plan <config> [key=value ...]`: what a run of this config would allocate, send and
// compute per rank, on one process, for any mesh (plan/step_plan.h, plan/inference_plan.h),
// with predicted times on a hardware profile (configs/hardware/<name>.yml).
//
// Besides the config keys it takes its own options (not config keys, so train and decode never
// see them): num_devices=N (the planned rank count; default: the product of the ici_/dcn_
// values given on the command line, -1 counting as 1), hardware_profile=<name or path> (default
// this-machine), mode=train|inference (default: inference when context_autoregressive > 1),
// format=table|json (or --json), search=true (train: every mesh and remat policy that fits,
// ranked; plan/plan_search.h).
#include <fmt/format.h>

#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>

#include "cli/commands.h"
#include "maxctx/config/config.h"
#include "maxctx/core/check.h"
#include "maxctx/core/log.h"
#include "maxctx/core/memory_check.h"
#include "maxctx/plan/hardware_profile.h"
#include "maxctx/plan/inference_plan.h"
#include "maxctx/plan/plan_search.h"
#include "maxctx/plan/step_plan.h"
#include "maxctx/train/training_axes.h"

namespace maxctx::cli {
namespace {

struct PlanOptions {
  std::optional<int64_t> num_devices;
  std::string hardware_profile = "this-machine";
  std::string mode;  // "", "train", "inference"
  bool json = false;
  bool search = false;
};

bool parse_bool(const std::string& key, const std::string& value) {
  if (value == "true") return true;
  if (value == "false") return false;
  fail("plan: {}='{}' must be true or false", key, value);
}

// Splits the plan's own options off the config overrides.
Args take_plan_options(const Args& args, PlanOptions& o) {
  Args rest;
  int64_t product = 1;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a == "--json") {
      o.json = true;
      continue;
    }
    const size_t eq = a.find('=');
    const std::string key = i == 0 || eq == std::string::npos ? "" : a.substr(0, eq);
    const std::string value = key.empty() ? "" : a.substr(eq + 1);
    if (key == "num_devices") {
      try {
        o.num_devices = std::stoll(value);
      } catch (const std::exception&) {
        fail("plan: num_devices='{}' is not a whole number", value);
      }
      if (*o.num_devices < 1) fail("plan: num_devices={} must be at least 1", *o.num_devices);
    } else if (key == "hardware_profile") {
      o.hardware_profile = value;
    } else if (key == "mode") {
      if (value != "train" && value != "inference") {
        fail("plan: mode='{}': allowed train|inference", value);
      }
      o.mode = value;
    } else if (key == "format") {
      if (value != "table" && value != "json") fail("plan: format='{}': allowed table|json", value);
      o.json = value == "json";
    } else if (key == "search") {
      o.search = parse_bool(key, value);
    } else {
      if ((key.starts_with("ici_") || key.starts_with("dcn_")) && key.ends_with("_parallelism")) {
        try {
          const int64_t v = std::stoll(value);
          if (v > 0) product *= v;
        } catch (const std::exception&) {
          // load_config reports the bad value with its own message.
        }
      }
      rest.push_back(a);
    }
  }
  if (!o.num_devices) o.num_devices = product;
  return rest;
}

std::string gib(double bytes) { return format_bytes(bytes); }

nlohmann::json traffic_json(const Traffic& t) {
  nlohmann::json j = nlohmann::json::object();
  for (const auto& [axis, counts] : t.axes()) {
    for (int k = 0; k < kNumCollectiveKinds; ++k) {
      if (counts[static_cast<size_t>(k)].calls == 0) continue;
      j[axis][std::string(collective_kind_name(static_cast<CollectiveKind>(k)))] = {
          {"calls", counts[static_cast<size_t>(k)].calls},
          {"bytes", counts[static_cast<size_t>(k)].bytes}};
    }
  }
  return j;
}

nlohmann::json training_json(const Config& c, const plan::TrainingPlan& p, const plan::StepTime& t,
                             const plan::HardwareProfile& hw) {
  const plan::TrainingMemory& m = p.memory;
  return {{"mode", "train"},
          {"model_name", c.model_name},
          {"mesh", p.dims.text()},
          {"num_devices", c.derived.num_devices},
          {"remat_policy", c.remat_policy},
          {"num_vocab_tiling", c.num_vocab_tiling},
          {"dtype", c.dtype},
          {"weight_dtype", c.weight_dtype},
          {"rows_per_rank", p.rows},
          {"tokens_per_row_per_rank", p.local_seq},
          {"memory_per_rank_bytes",
           {{"parameters", m.parameters},
            {"optimizer", m.optimizer},
            {"gradients", m.gradients},
            {"gathered_units", m.gathered_units},
            {"activations", m.activations},
            {"activations_offloaded_to_host", m.offloaded_activations},
            {"logits_in_activations", m.logits},
            {"attention_staging", m.attention_staging},
            {"starting_state", m.starting_state},
            {"checkpoint_state", m.checkpoint_state},
            {"checkpoint_state_on_device", m.host_is_device},
            {"async_checkpointing", m.async_checkpointing},
            {"expert_routing_skew", m.expert_routing_skew},
            {"step", m.step()},
            {"runtime", hw.runtime_bytes},
            {"peak", static_cast<double>(m.peak()) + hw.runtime_bytes}}},
          {"communication_per_step", traffic_json(p.traffic)},
          {"tflops_per_device_per_step",
           {{"model", p.model_tflops.total},
            {"model_attention", p.model_tflops.attention},
            {"executed_with_recompute", p.executed_tflops.total}}},
          {"hardware_profile", hw.name},
          {"fits", static_cast<double>(m.peak()) + hw.runtime_bytes <= hw.memory_bytes},
          {"predicted",
           {{"compute_seconds", t.compute_seconds},
            {"matmul_seconds", t.matmul_seconds},
            {"attention_seconds", t.attention_seconds},
            {"vector_seconds", t.vector_seconds},
            {"communication_seconds", t.communication_seconds},
            {"step_seconds", t.seconds()},
            {"mfu", t.mfu}}}};
}

std::string training_table(const Config& c, const plan::TrainingPlan& p, const plan::StepTime& t,
                           const plan::HardwareProfile& hw) {
  const plan::TrainingMemory& m = p.memory;
  std::string s = fmt::format(
      "plan: train {} on {} devices ({}), remat_policy={} dtype={} weight_dtype={}\n"
      "per rank: {} sequences x {} tokens\n\nmemory per rank\n",
      c.model_name, c.derived.num_devices, p.dims.text(), c.remat_policy, c.dtype, c.weight_dtype,
      p.rows, p.local_seq);
  const auto row = [&](const char* name, int64_t bytes) {
    s += fmt::format("  {:<22}{:>14}\n", name, gib(static_cast<double>(bytes)));
  };
  row("parameters", m.parameters);
  row("optimizer state", m.optimizer);
  row("gradients", m.gradients);
  row("gathered units", m.gathered_units);
  row("activations", m.activations);
  s += fmt::format("  {:<22}{:>14}  (num_vocab_tiling = {})\n", "  of which logits",
                   gib(static_cast<double>(m.logits)), c.num_vocab_tiling);
  row("attention staging", m.attention_staging);
  row("step (all above)", m.step());
  if (m.offloaded_activations > 0) row("activations (host)", m.offloaded_activations);
  row("starting state", m.starting_state);
  if (m.checkpoint_state > 0) {
    row(m.host_is_device ? "checkpoint staging" : "checkpoint staging (host)", m.checkpoint_state);
  }
  row("runtime", static_cast<int64_t>(hw.runtime_bytes));
  const double peak = static_cast<double>(m.peak()) + hw.runtime_bytes;
  row("peak", static_cast<int64_t>(peak));
  s += fmt::format("  device memory ({}): {}{}\n", hw.name, gib(hw.memory_bytes),
                   peak <= hw.memory_bytes ? "" : "  DOES NOT FIT");
  if (m.expert_routing_skew > 0) {
    s += fmt::format(
        "  (activations at the mean routing over expert ranks; a rank whose experts get every "
        "row they can holds {} more)\n",
        gib(static_cast<double>(m.expert_routing_skew)));
  }
  s += "\ncommunication per step\n";
  for (const auto& [axis, counts] : p.traffic.axes()) {
    for (int k = 0; k < kNumCollectiveKinds; ++k) {
      const TrafficCount& n = counts[static_cast<size_t>(k)];
      if (n.calls == 0) continue;
      s += fmt::format("  {:<22}{:<16}{:>8} calls {:>14}\n", axis,
                       collective_kind_name(static_cast<CollectiveKind>(k)), n.calls,
                       gib(static_cast<double>(n.bytes)));
    }
  }
  if (p.traffic.axes().empty()) s += "  (none: one rank)\n";
  s += fmt::format(
      "\nTFLOPs per device per step: {:.4g} (MaxText's count; attention {:.4g}), {:.4g} executed "
      "with recomputation\npredicted on {}: compute {:.4g} s (matmuls {:.4g}, attention {:.4g}, "
      "vector kernels {:.4g}) + communication {:.4g} s = step {:.4g} s, MFU {:.1f}%\n",
      p.model_tflops.total, p.model_tflops.attention, p.executed_tflops.total, hw.name,
      t.compute_seconds, t.matmul_seconds, t.attention_seconds, t.vector_seconds,
      t.communication_seconds, t.seconds(), 100 * t.mfu);
  return s;
}

nlohmann::json inference_json(const Config& c, const plan::InferencePlan& p,
                              const plan::InferenceTimes& t, const plan::HardwareProfile& hw) {
  nlohmann::json prefill = nlohmann::json::array();
  for (const plan::PrefillPoint& x : t.prefill) {
    prefill.push_back({{"length", x.length},
                       {"flops_per_rank", x.flops},
                       {"seconds", x.seconds},
                       {"matmul_seconds", x.matmul_seconds},
                       {"attention_seconds", x.attention_seconds},
                       {"vector_seconds", x.vector_seconds},
                       {"communication_seconds", x.communication_seconds}});
  }
  return {{"mode", "inference"},
          {"model_name", c.model_name},
          {"context_autoregressive", p.ca},
          {"expert", p.expert},
          {"slots", p.settings.slots},
          {"max_target_length", p.settings.max_target_length},
          {"quantization", c.quantization},
          {"quantize_kvcache", c.quantize_kvcache},
          {"memory_per_rank_bytes",
           {{"weights", p.weight_bytes},
            {"int8_copies", p.int8_copy_bytes},
            {"kv_cache", p.kv_cache_bytes},
            {"workspace", p.workspace_bytes},
            {"prefill_attention_staging", p.prefill_staging_bytes},
            {"runtime", hw.runtime_bytes},
            {"peak", static_cast<double>(p.total()) + hw.runtime_bytes}}},
          {"decode_step_bytes_per_rank", p.decode_step_bytes + p.decode_cache_bytes},
          {"hardware_profile", hw.name},
          {"fits", static_cast<double>(p.total()) + hw.runtime_bytes <= hw.memory_bytes},
          {"predicted",
           {{"prefill", prefill},
            {"decode_step_seconds", t.decode_step_seconds},
            {"decode_breakdown",
             {{"matmul_seconds", t.decode_matmul_seconds},
              {"attention_seconds", t.decode_attention_seconds},
              {"vector_seconds", t.decode_vector_seconds},
              {"communication_seconds", t.decode_communication_seconds}}},
            {"decode_operands_cached", t.decode_operands_cached},
            {"decode_bandwidth_bytes_per_second", t.decode_bandwidth},
            {"decode_tokens_per_second", t.decode_tokens_per_second}}}};
}

std::string inference_table(const Config& c, const plan::InferencePlan& p,
                            const plan::InferenceTimes& t, const plan::HardwareProfile& hw) {
  std::string s = fmt::format(
      "plan: inference {} over context_autoregressive={} expert={}, {} slots, "
      "max_target_length={}, quantization='{}' quantize_kvcache={}\n\nmemory per rank\n",
      c.model_name, p.ca, p.expert, p.settings.slots, p.settings.max_target_length, c.quantization,
      c.quantize_kvcache);
  const auto row = [&](const char* name, int64_t bytes) {
    s += fmt::format("  {:<22}{:>14}\n", name, gib(static_cast<double>(bytes)));
  };
  row("weights", p.weight_bytes);
  row("int8 copies", p.int8_copy_bytes);
  row("KV cache", p.kv_cache_bytes);
  row("workspace", p.workspace_bytes);
  row("prefill staging", p.prefill_staging_bytes);
  row("runtime", static_cast<int64_t>(hw.runtime_bytes));
  const double peak = static_cast<double>(p.total()) + hw.runtime_bytes;
  row("peak", static_cast<int64_t>(peak));
  s += fmt::format("  device memory ({}): {}{}\n\npredicted on {}\n", hw.name, gib(hw.memory_bytes),
                   peak <= hw.memory_bytes ? "" : "  DOES NOT FIT", hw.name);
  for (const plan::PrefillPoint& x : t.prefill) {
    s += fmt::format(
        "  prefill {:>7} tokens: {:.4g} s (matmuls {:.4g}, attention {:.4g}, vector kernels "
        "{:.4g}, communication {:.4g})\n",
        x.length, x.seconds, x.matmul_seconds, x.attention_seconds, x.vector_seconds,
        x.communication_seconds);
  }
  s += fmt::format(
      "  decode step: {:.4g} s (matmuls {:.4g}, attention {:.4g}, vector kernels {:.4g}, "
      "communication {:.4g}) streaming {} per rank ({:.4g} GB/s{}), {:.4g} tokens/s\n",
      t.decode_step_seconds, t.decode_matmul_seconds, t.decode_attention_seconds,
      t.decode_vector_seconds, t.decode_communication_seconds,
      gib(static_cast<double>(p.decode_step_bytes + p.decode_cache_bytes)),
      t.decode_bandwidth / 1e9, t.decode_operands_cached ? ", from the device's cache" : "",
      t.decode_tokens_per_second);
  return s;
}

void print(const std::string& text) {
  if (log::rank() == 0) std::fputs(text.c_str(), stdout);
}

}  // namespace

int run_plan(const Args& args) {
  if (args.empty() || args[0].find('=') != std::string::npos) {
    fail("plan needs a config file first: maxctx plan configs/base.yml [key=value ...]");
  }
  PlanOptions o;
  const Args overrides = take_plan_options(Args(args.begin() + 1, args.end()), o);
  // --json's stdout is one JSON document: lines logged while planning (a Hugging Face config
  // read for the model) go to stderr.
  if (o.json) log::set_info_to_stderr(true);
  const Config config = load_config(args[0], overrides, *o.num_devices);
  const std::string config_dir = std::filesystem::path(args[0]).parent_path().string();
  const plan::HardwareProfile hw = plan::load_hardware_profile(o.hardware_profile, config_dir);
  const int64_t ca = train::axis_sizes_of(config)[axis_index(Axis::kContextAutoregressive)];
  const std::string mode = !o.mode.empty() ? o.mode : ca > 1 ? "inference" : "train";
  if (mode == "inference") {
    if (o.search) fail("plan: search=true plans training meshes; drop mode=inference");
    const plan::InferencePlan p = plan::plan_inference(config);
    const plan::InferenceTimes t = plan::predict_inference(p, hw);
    print(o.json ? inference_json(config, p, t, hw).dump(2) + "\n"
                 : inference_table(config, p, t, hw));
    return 0;
  }
  if (o.search) {
    const std::vector<plan::PlanCandidate> found =
        plan::search_training_plans(args[0], overrides, *o.num_devices, hw);
    print(o.json ? plan::search_json(found).dump(2) + "\n" : plan::search_table(found, hw));
    return 0;
  }
  plan::TrainingPlan p = plan::plan_training(config);
  p.memory.set_host_is_device(hw.host_memory);
  const plan::StepTime t = plan::predict_step_time(p, config, hw);
  print(o.json ? training_json(config, p, t, hw).dump(2) + "\n" : training_table(config, p, t, hw));
  return 0;
}

}  // namespace maxctx::cli

#include "maxctx/plan/plan_search.h"

#include <fmt/format.h>

#include <algorithm>

#include "maxctx/config/config.h"
#include "maxctx/core/check.h"
#include "maxctx/core/memory_check.h"
#include "maxctx/model/remat.h"
#include "maxctx/train/initial_state.h"

namespace maxctx::plan {
namespace {

std::vector<std::string> remat_policies() {
  std::vector<std::string> names;
  const std::string all = model::supported_remat_policies();
  size_t begin = 0;
  while (begin <= all.size()) {
    const size_t end = std::min(all.find('|', begin), all.size());
    names.push_back(all.substr(begin, end - begin));
    begin = end + 1;
  }
  return names;
}

bool is_searched_key(const std::string& override_text) {
  const std::string key = override_text.substr(0, override_text.find('='));
  return key == "remat_policy" ||
         ((key.starts_with("ici_") || key.starts_with("dcn_")) && key.ends_with("_parallelism"));
}

// The axes a training mesh varies: every one but the inference axis.
bool searched(Axis axis) { return axis != Axis::kContextAutoregressive; }

std::string mesh_label(const PlanCandidate& c) {
  std::string label;
  for (Axis axis : kAllAxes) {
    if (!searched(axis)) continue;
    label += fmt::format("{}{}={}", label.empty() ? "" : " ", axis_name(axis), c.size(axis));
  }
  return label;
}

// Plans `c` (its mesh on the ici tier, the user's other keys in `base`): fills fits, reason,
// peak and time. False for a candidate not worth listing: the expert axis on a dense model only
// splits the batch, as data does.
bool plan_candidate(const std::string& config_path, const std::vector<std::string>& base, int64_t n,
                    const HardwareProfile& profile, PlanCandidate& c) {
  std::vector<std::string> keys = base;
  for (const char* tier : {"ici", "dcn"}) {
    const bool ici = std::string_view(tier) == "ici";
    for (Axis axis : kAllAxes) {
      keys.push_back(
          fmt::format("{}_{}_parallelism={}", tier, axis_name(axis), ici ? c.size(axis) : 1));
    }
  }
  keys.push_back("remat_policy=" + c.remat_policy);
  try {
    const Config config = load_config(config_path, keys, n);
    if (c.size(Axis::kExpert) > 1 && !train::training_model_config(config).moe) return false;
    TrainingPlan plan = plan_training(config);
    plan.memory.set_host_is_device(profile.host_memory);
    c.peak_bytes = plan.memory.peak() + static_cast<int64_t>(profile.runtime_bytes);
    if (static_cast<double>(c.peak_bytes) > profile.memory_bytes) {
      c.reason = fmt::format("memory: peak {} per rank > {} on {}",
                             format_bytes(static_cast<double>(c.peak_bytes)),
                             format_bytes(profile.memory_bytes), profile.name);
    } else {
      c.fits = true;
      c.time = predict_step_time(plan, config, profile);
    }
  } catch (const Error& e) {
    c.reason = e.what();
  }
  return true;
}

}  // namespace

std::vector<PlanCandidate> search_training_plans(const std::string& config_path,
                                                 const std::vector<std::string>& overrides,
                                                 int64_t n, const HardwareProfile& profile) {
  std::vector<std::string> base;
  for (const std::string& o : overrides) {
    if (!is_searched_key(o)) base.push_back(o);
  }
  const std::vector<std::string> policies = remat_policies();
  std::vector<PlanCandidate> found;
  // The mesh's axes in the order they are enumerated; tensor takes what is left.
  for (int64_t data = 1; data <= n; ++data) {
    if (n % data != 0) continue;
    for (int64_t fsdp = 1; fsdp <= n / data; ++fsdp) {
      if ((n / data) % fsdp != 0) continue;
      for (int64_t context = 1; context <= n / data / fsdp; ++context) {
        if ((n / data / fsdp) % context != 0) continue;
        for (int64_t expert = 1; expert <= n / data / fsdp / context; ++expert) {
          if ((n / data / fsdp / context) % expert != 0) continue;
          const int64_t tensor = n / data / fsdp / context / expert;
          for (const std::string& policy : policies) {
            PlanCandidate c;
            c.mesh[axis_index(Axis::kData)] = data;
            c.mesh[axis_index(Axis::kFsdp)] = fsdp;
            c.mesh[axis_index(Axis::kContext)] = context;
            c.mesh[axis_index(Axis::kExpert)] = expert;
            c.mesh[axis_index(Axis::kTensor)] = tensor;
            c.remat_policy = policy;
            if (plan_candidate(config_path, base, n, profile, c)) found.push_back(std::move(c));
          }
        }
      }
    }
  }
  std::stable_sort(found.begin(), found.end(), [](const PlanCandidate& a, const PlanCandidate& b) {
    if (a.fits != b.fits) return a.fits;
    if (!a.fits) return false;
    // Equal times (policies that differ only in memory): the smaller peak first.
    if (a.time.seconds() != b.time.seconds()) return a.time.seconds() < b.time.seconds();
    return a.peak_bytes < b.peak_bytes;
  });
  return found;
}

nlohmann::json search_json(const std::vector<PlanCandidate>& candidates) {
  nlohmann::json fits = nlohmann::json::array();
  nlohmann::json rejected = nlohmann::json::array();
  for (const PlanCandidate& c : candidates) {
    nlohmann::json j = {{"remat_policy", c.remat_policy}};
    for (Axis axis : kAllAxes) {
      if (searched(axis)) j[std::string(axis_name(axis))] = c.size(axis);
    }
    if (c.fits) {
      j["peak_bytes"] = c.peak_bytes;
      j["step_seconds"] = c.time.seconds();
      j["mfu"] = c.time.mfu;
      fits.push_back(j);
    } else {
      j["reason"] = c.reason;
      rejected.push_back(j);
    }
  }
  return {{"fits", fits}, {"rejected", rejected}};
}

std::string search_table(const std::vector<PlanCandidate>& candidates,
                         const HardwareProfile& profile) {
  std::string s = fmt::format("meshes that fit {} ({} per device), fastest first\n", profile.name,
                              format_bytes(profile.memory_bytes));
  int64_t fitting = 0;
  for (const PlanCandidate& c : candidates) {
    if (!c.fits) continue;
    ++fitting;
    s += fmt::format("  {:<53} remat={:<34} peak {:>10}  step {:.4g} s  MFU {:.1f}%\n",
                     mesh_label(c), c.remat_policy, format_bytes(static_cast<double>(c.peak_bytes)),
                     c.time.seconds(), 100 * c.time.mfu);
  }
  if (fitting == 0) s += "  (none)\n";
  s += "\nrejected\n";
  for (const PlanCandidate& c : candidates) {
    if (c.fits) continue;
    s += fmt::format("  {:<53} remat={:<34} {}\n", mesh_label(c), c.remat_policy, c.reason);
  }
  return s;
}

}  // namespace maxctx::plan

#include "maxctx/model/remat.h"

#include <array>

#include "maxctx/core/check.h"

namespace maxctx::model {
namespace {

struct NamedPolicy {
  const char* name;
  bool save_all, qkv, context, out_proj, mlpwi;
};

// MaxText's get_remat_policy, name by name (mlpwo is always kept here, see remat.h).
constexpr std::array<NamedPolicy, 10> kPolicies = {{
    {"none", true, true, true, true, true},
    {"full", false, false, false, false, false},
    {"minimal", false, true, false, true, true},
    {"minimal_with_context", false, true, true, true, true},
    {"minimal_flash", false, true, true, true, true},  // MaxText's older name of the above
    {"save_dot_with_context_except_mlp", false, true, true, true, false},
    {"save_dot_except_mlpwi", false, true, false, true, false},
    {"save_dot_except_mlp", false, true, false, true, false},
    {"save_qkv_proj", false, true, false, false, false},
    {"save_out_proj", false, false, false, true, false},
}};

}  // namespace

std::string supported_remat_policies() {
  std::string names;
  for (const NamedPolicy& p : kPolicies) {
    if (!names.empty()) names.push_back('|');
    names.append(p.name);
  }
  return names;
}

RematPolicy remat_policy_from(const std::string& name) {
  for (const NamedPolicy& p : kPolicies) {
    if (name != p.name) continue;
    return {p.name, p.save_all, p.qkv, p.context, p.out_proj, p.mlpwi};
  }
  if (name == "qkv_proj_offloaded" || name == "minimal_offloaded" || name == "custom" ||
      name.find("quantization") != std::string::npos) {
    fail(
        "remat_policy = {} offloads to host memory or saves quantized values, which this engine "
        "does not do; supported: {}",
        name, supported_remat_policies());
  }
  fail("remat_policy = '{}' is not a remat policy; supported: {}", name,
       supported_remat_policies());
}

}  // namespace maxctx::model

#include "maxctx/model/remat.h"

#include <array>
#include <initializer_list>
#include <utility>

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
  return names + "|custom";
}

RematLocation remat_location_from(const std::string& key, const std::string& value) {
  if (value == "remat") return RematLocation::kRemat;
  if (value == "device") return RematLocation::kDevice;
  if (value == "offload") return RematLocation::kOffload;
  fail("{} = '{}' is not a remat location; use remat, device or offload", key, value);
}

namespace {

// One of the tensors maxctx keeps or recomputes as a whole, from the MaxText names it covers:
// all of them in one place (a name left at `remat` defers to the others), or an error.
RematLocation group_location(const char* what,
                             std::initializer_list<std::pair<const char*, RematLocation>> names) {
  RematLocation location = RematLocation::kRemat;
  const char* set_by = nullptr;
  for (const auto& [name, value] : names) {
    if (value == RematLocation::kRemat) continue;
    if (set_by != nullptr && value != location) {
      fail(
          "remat_policy = custom: {} = {} but {} = {}; this engine keeps {} together, so give "
          "them the same location",
          set_by, location == RematLocation::kDevice ? "device" : "offload", name,
          value == RematLocation::kDevice ? "device" : "offload", what);
    }
    location = value;
    set_by = name;
  }
  return location;
}

}  // namespace

RematPolicy remat_policy_from(const std::string& name, const CustomRemat& custom) {
  for (const NamedPolicy& p : kPolicies) {
    if (name != p.name) continue;
    return {p.name, p.save_all, p.qkv, p.context, p.out_proj, p.mlpwi, {}};
  }
  if (name == "custom") {
    const CustomRemat& c = custom;
    // The layer input is what a recomputation starts from: always kept, on the device or not.
    if (c.decoder_layer_input == RematLocation::kRemat) {
      fail(
          "remat_policy = custom: decoder_layer_input = remat, but a layer's input is what its "
          "recomputation starts from; use device or offload");
    }
    // mlpwo's output plus the stream is the next layer's input: it is kept as that input is.
    if (c.mlpwo != RematLocation::kRemat && c.mlpwo != c.decoder_layer_input) {
      fail(
          "remat_policy = custom: mlpwo = {} but decoder_layer_input = {}; the MLP's output "
          "becomes the next layer's input, which this engine keeps where decoder_layer_input "
          "says",
          c.mlpwo == RematLocation::kDevice ? "device" : "offload",
          c.decoder_layer_input == RematLocation::kDevice ? "device" : "offload");
    }
    const RematLocation qkv = group_location("q, k and v", {{"query_proj", c.query_proj},
                                                            {"key_proj", c.key_proj},
                                                            {"value_proj", c.value_proj},
                                                            {"qkv_proj", c.qkv_proj}});
    if (qkv != RematLocation::kRemat &&
        (c.query_proj == RematLocation::kRemat || c.key_proj == RematLocation::kRemat ||
         c.value_proj == RematLocation::kRemat) &&
        c.qkv_proj == RematLocation::kRemat) {
      fail(
          "remat_policy = custom: query_proj, key_proj and value_proj must be kept or "
          "recomputed together here (q and k after RoPE and v are one saved set)");
    }
    const RematLocation mlpwi = group_location(
        "gate and up", {{"mlpwi", c.mlpwi}, {"mlpwi_0", c.mlpwi_0}, {"mlpwi_1", c.mlpwi_1}});
    if (mlpwi != RematLocation::kRemat && c.mlpwi == RematLocation::kRemat &&
        (c.mlpwi_0 == RematLocation::kRemat || c.mlpwi_1 == RematLocation::kRemat)) {
      fail(
          "remat_policy = custom: mlpwi_0 and mlpwi_1 must be kept or recomputed together here "
          "(gate and up are one saved set)");
    }
    const auto kept = [](RematLocation l) { return l != RematLocation::kRemat; };
    const auto offloaded = [](RematLocation l) { return l == RematLocation::kOffload; };
    RematPolicy p{"custom", false, kept(qkv), kept(c.context), kept(c.out_proj), kept(mlpwi), {}};
    p.offloaded = {offloaded(c.decoder_layer_input), offloaded(qkv), offloaded(c.context),
                   offloaded(c.out_proj), offloaded(mlpwi)};
    return p;
  }
  if (name == "qkv_proj_offloaded" || name == "minimal_offloaded" ||
      name.find("quantization") != std::string::npos) {
    fail(
        "remat_policy = {} is not supported here (remat_policy = custom offloads the tensors "
        "you name); supported: {}",
        name, supported_remat_policies());
  }
  fail("remat_policy = '{}' is not a remat policy; supported: {}", name,
       supported_remat_policies());
}

RematPolicy remat_policy_of(const Config& c) {
  CustomRemat custom;
  const auto at = [](const char* key, const std::string& value) {
    return remat_location_from(key, value);
  };
  custom.decoder_layer_input = at("decoder_layer_input", c.decoder_layer_input);
  custom.context = at("context", c.context);
  custom.mlpwi = at("mlpwi", c.mlpwi);
  custom.mlpwi_0 = at("mlpwi_0", c.mlpwi_0);
  custom.mlpwi_1 = at("mlpwi_1", c.mlpwi_1);
  custom.mlpwo = at("mlpwo", c.mlpwo);
  custom.query_proj = at("query_proj", c.query_proj);
  custom.key_proj = at("key_proj", c.key_proj);
  custom.value_proj = at("value_proj", c.value_proj);
  custom.qkv_proj = at("qkv_proj", c.qkv_proj);
  custom.out_proj = at("out_proj", c.out_proj);
  return remat_policy_from(c.remat_policy, custom);
}

RematPolicy without_offload(RematPolicy policy) {
  policy.offloaded = {};
  return policy;
}

}  // namespace maxctx::model

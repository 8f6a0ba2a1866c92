// The named axes of the device mesh, in MaxText's order (the subset of MaxText's twelve axes that
// maxctx uses). The order is part of the contract: rank layout, group ranks and config keys
// (`ici_<name>_parallelism`, `dcn_<name>_parallelism`) all follow it. `context` shards training
// sequences; `context_autoregressive` shards inference prompts and KV caches.
#pragma once

#include <array>
#include <cstddef>
#include <string_view>

namespace maxctx {

enum class Axis { kData, kFsdp, kContext, kContextAutoregressive, kTensor, kExpert };

inline constexpr int kNumAxes = 6;

// Every axis in canonical order: `for (Axis axis : kAllAxes)`.
inline constexpr std::array<Axis, kNumAxes> kAllAxes = {
    Axis::kData,   Axis::kFsdp,  Axis::kContext, Axis::kContextAutoregressive,
    Axis::kTensor, Axis::kExpert};

constexpr std::size_t axis_index(Axis axis) { return static_cast<std::size_t>(axis); }

constexpr std::string_view axis_name(Axis axis) {
  constexpr std::array<std::string_view, kNumAxes> kNames = {
      "data", "fsdp", "context", "context_autoregressive", "tensor", "expert"};
  return kNames[axis_index(axis)];
}

}  // namespace maxctx

// The named axes of the device mesh as an enum, generated from the one axis list
// (core/mesh_axes.h: MaxText's order). The order is part of the contract: rank layout, group ranks
// and config keys (`ici_<name>_parallelism`, `dcn_<name>_parallelism`) all follow it. `context`
// shards training sequences; `context_autoregressive` shards inference prompts and KV caches.
#pragma once

#include <array>
#include <cstddef>
#include <string_view>

#include "maxctx/core/mesh_axes.h"

namespace maxctx {

enum class Axis {
#define MAXCTX_AXIS_ENUMERATOR(Enumerator, name) k##Enumerator,
  MAXCTX_MESH_AXES(MAXCTX_AXIS_ENUMERATOR)
#undef MAXCTX_AXIS_ENUMERATOR
};

inline constexpr int kNumAxes = kNumMeshAxes;

// Every axis in canonical order: `for (Axis axis : kAllAxes)`.
inline constexpr std::array<Axis, kNumAxes> kAllAxes = {
#define MAXCTX_AXIS_VALUE(Enumerator, name) Axis::k##Enumerator,
    MAXCTX_MESH_AXES(MAXCTX_AXIS_VALUE)
#undef MAXCTX_AXIS_VALUE
};

constexpr std::size_t axis_index(Axis axis) { return static_cast<std::size_t>(axis); }

constexpr std::string_view axis_name(Axis axis) {
  constexpr std::array<std::string_view, kNumAxes> kNames = {
#define MAXCTX_AXIS_NAME(Enumerator, name) #name,
      MAXCTX_MESH_AXES(MAXCTX_AXIS_NAME)
#undef MAXCTX_AXIS_NAME
  };
  return kNames[axis_index(axis)];
}

}  // namespace maxctx

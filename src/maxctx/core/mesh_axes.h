// The device mesh's named axes, listed once (an X-macro), in MaxText's order (the subset of its
// twelve axes that maxctx uses). Everything that names every axis is generated from this list:
// mesh/axis.h's Axis enum, names and kAllAxes; the config's per-axis degree arrays (whose keys,
// `ici_<name>_parallelism` and `dcn_<name>_parallelism`, config.cpp reads through it, so an axis
// without its keys does not compile); parallel::ParallelDims' per-axis degrees. In core/ because
// config/ and mesh/ both read it and neither may include the other.
//
// X(Enumerator, name): Axis::k<Enumerator>, and `name` as it appears in config keys and messages.
#pragma once

#define MAXCTX_MESH_AXES(X)                        \
  X(Data, data)                                    \
  X(Fsdp, fsdp)                                    \
  X(Context, context)                              \
  X(ContextAutoregressive, context_autoregressive) \
  X(Tensor, tensor)                                \
  X(Expert, expert)

namespace maxctx {

#define MAXCTX_COUNT_MESH_AXIS(Enumerator, name) +1
inline constexpr int kNumMeshAxes = 0 MAXCTX_MESH_AXES(MAXCTX_COUNT_MESH_AXIS);
#undef MAXCTX_COUNT_MESH_AXIS

}  // namespace maxctx

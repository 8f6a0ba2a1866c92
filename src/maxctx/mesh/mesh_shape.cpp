// Mesh shape resolution and rank layout (see mesh_shape.h). Messages name MaxText's config keys so
// that a user can fix the YAML or the override directly.
#include "maxctx/mesh/mesh_shape.h"

#include <fmt/format.h>

#include <string>

#include "maxctx/core/check.h"

namespace maxctx {
namespace {

// "data=2 x fsdp=1 x context=3 x ..." for an error message.
std::string factor_list(const AxisArray& factors) {
  std::string text;
  for (Axis axis : kAllAxes) {
    if (!text.empty()) text += " x ";
    text += fmt::format("{}={}", axis_name(axis), factors[axis_index(axis)]);
  }
  return text;
}

// What a list's product must match: `count` ranks per node (ici) or nodes (dcn).
struct Target {
  const char* list;      // "ici" or "dcn"
  int64_t count;         // ranks per node or number of nodes
  const char* noun;      // "ranks per node" or "nodes"
  std::string sentence;  // "each node has 4 ranks" or "there are 2 nodes"
};

AxisArray resolve_factors(const AxisArray& factors, const Target& target) {
  const char* list = target.list;
  int fill = -1;
  int64_t product_of_others = 1;
  for (Axis axis : kAllAxes) {
    const int64_t value = factors[axis_index(axis)];
    if (value == -1) {
      if (fill >= 0) {
        fail(
            "mesh: {}_{}_parallelism and {}_{}_parallelism are both -1 ({}) but only one {} "
            "value may fill the {} {}; set the other to a positive integer",
            list, axis_name(kAllAxes[fill]), list, axis_name(axis), factor_list(factors), list,
            target.count, target.noun);
      }
      fill = static_cast<int>(axis_index(axis));
    } else if (value < 1) {
      fail(
          "mesh: {}_{}_parallelism is {} ({}) but each {} value must be a positive integer or "
          "-1, and together they must multiply to the {} {}",
          list, axis_name(axis), value, factor_list(factors), list, target.count, target.noun);
    } else {
      product_of_others *= value;
    }
  }
  AxisArray resolved = factors;
  if (fill >= 0) {
    if (target.count % product_of_others != 0) {
      fail(
          "mesh: {}_{}_parallelism is -1 but the other {} values multiply to {} ({}), which "
          "does not divide the {} {}; set them so that their product divides {}",
          list, axis_name(kAllAxes[fill]), list, product_of_others, factor_list(factors),
          target.count, target.noun, target.count);
    }
    resolved[fill] = target.count / product_of_others;
    return resolved;
  }
  if (product_of_others != target.count) {
    fail(
        "mesh: {} parallelism product is {} ({}) but {}; set the {}_*_parallelism values so "
        "that their product is {}, or use one -1 to fill",
        list, product_of_others, factor_list(factors), target.sentence, list, target.count);
  }
  return resolved;
}

// Row-major unravel of index over sizes (last axis fastest).
AxisArray unravel(int64_t index, const AxisArray& sizes) {
  AxisArray coords{};
  for (int a = kNumAxes - 1; a >= 0; --a) {
    coords[a] = index % sizes[a];
    index /= sizes[a];
  }
  return coords;
}

}  // namespace

AxisArray MeshShape::axis_sizes() const {
  AxisArray sizes{};
  for (Axis axis : kAllAxes) sizes[axis_index(axis)] = axis_size(axis);
  return sizes;
}

MeshShape resolve_mesh_shape(const MeshSpec& spec, int64_t num_nodes, int64_t ranks_per_node) {
  MAXCTX_CHECK_GE(num_nodes, 1, "a mesh needs at least one node");
  MAXCTX_CHECK_GE(ranks_per_node, 1, "a node holds at least one rank");
  MeshShape shape;
  shape.num_nodes = num_nodes;
  shape.ranks_per_node = ranks_per_node;
  const bool one_rank = ranks_per_node == 1;
  const bool one_node = num_nodes == 1;
  shape.ici = resolve_factors(
      spec.ici, {"ici", ranks_per_node, one_rank ? "rank per node" : "ranks per node",
                 fmt::format("each node has {} rank{}", ranks_per_node, one_rank ? "" : "s")});
  shape.dcn = resolve_factors(spec.dcn, {"dcn", num_nodes, one_node ? "node" : "nodes",
                                         fmt::format("there {} {} node{}", one_node ? "is" : "are",
                                                     num_nodes, one_node ? "" : "s")});
  return shape;
}

AxisArray mesh_coords(const MeshShape& shape, int64_t node_index, int64_t local_rank) {
  MAXCTX_CHECK(node_index >= 0 && node_index < shape.num_nodes, "node index {} of {} nodes",
               node_index, shape.num_nodes);
  MAXCTX_CHECK(local_rank >= 0 && local_rank < shape.ranks_per_node,
               "local rank {} of {} ranks per node", local_rank, shape.ranks_per_node);
  const AxisArray dcn_coords = unravel(node_index, shape.dcn);
  const AxisArray ici_coords = unravel(local_rank, shape.ici);
  AxisArray coords{};
  for (int a = 0; a < kNumAxes; ++a) coords[a] = dcn_coords[a] * shape.ici[a] + ici_coords[a];
  return coords;
}

int64_t masked_linear_index(const AxisArray& coords, const AxisArray& sizes, unsigned axis_mask) {
  int64_t index = 0;
  for (int a = 0; a < kNumAxes; ++a) {
    if (axis_mask & (1u << a)) index = index * sizes[a] + coords[a];
  }
  return index;
}

}  // namespace maxctx

// The mesh's shape and rank layout as pure arithmetic, no MPI: what the config asks for
// (MeshSpec), the resolved per-axis factors (MeshShape), and where a rank sits on every axis.
//
// Invariants after resolve_mesh_shape: every factor is >= 1, the ici factors multiply to the
// ranks per node and the dcn factors to the number of nodes. An axis has size ici_X * dcn_X; a
// rank's coordinate on X is dcn_coord_X * ici_X + ici_coord_X (the DCN factor is the outer,
// slower-varying part, as in MaxText's hybrid mesh), where the dcn coordinates unravel the node
// index and the ici coordinates the local rank, both row-major in canonical axis order.
#pragma once

#include <array>
#include <cstdint>

#include "maxctx/mesh/axis.h"

namespace maxctx {

using AxisArray = std::array<int64_t, kNumAxes>;

inline constexpr AxisArray kAllOnes = {1, 1, 1, 1, 1, 1};

// ici[X] / dcn[X] are MaxText's ici_<X>_parallelism / dcn_<X>_parallelism: a positive factor, or
// -1 (at most one per list) for "whatever fills the rest".
struct MeshSpec {
  AxisArray ici = kAllOnes;
  AxisArray dcn = kAllOnes;
  // 0: find nodes with MPI_Comm_split_type(MPI_COMM_TYPE_SHARED). K > 0: pretend the world ranks
  // sit on K nodes in contiguous blocks of world rank (tests on one machine).
  int simulated_nodes = 0;
};

struct MeshShape {
  AxisArray ici = kAllOnes;  // factor inside a node, no -1 left
  AxisArray dcn = kAllOnes;  // factor across nodes, no -1 left
  int64_t num_nodes = 1;
  int64_t ranks_per_node = 1;

  int64_t axis_size(Axis axis) const { return ici[axis_index(axis)] * dcn[axis_index(axis)]; }
  AxisArray axis_sizes() const;
  int64_t num_ranks() const { return num_nodes * ranks_per_node; }
};

// Fills the -1s and checks the products; any inconsistency is a maxctx::Error with one line that
// names the product and the rank (or node) count it had to match.
MeshShape resolve_mesh_shape(const MeshSpec& spec, int64_t num_nodes, int64_t ranks_per_node);

// The coordinate on every axis of the rank with this node index and local rank.
AxisArray mesh_coords(const MeshShape& shape, int64_t node_index, int64_t local_rank);

// Row-major index of coords over the axes whose bit (1 << axis_index) is set in axis_mask, in
// canonical order, with the given axis sizes. Mask 0 gives 0.
int64_t masked_linear_index(const AxisArray& coords, const AxisArray& sizes, unsigned axis_mask);

}  // namespace maxctx

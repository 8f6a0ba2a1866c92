// Mesh: the world's ranks arranged on the named axes (axis.h), with a communicator for every
// axis and every combination of axes.
//
// What it is not: a sharding plan. parallel/ decides which tensor is split over which axis; the
// mesh only says where this rank sits and whom it talks to.
//
// Invariants: construction is collective over the base communicator (the world) and creates every
// communicator eagerly, in the same order on every rank (split is collective), so axis() and
// group() are cheap, const and never collective. A group over axes A is the ranks that differ only
// on A; a rank's rank in it is its row-major index over A in canonical axis order (for one axis:
// its coordinate). Axes of size 1 add nothing, so groups that differ only by them share one
// communicator.
#pragma once

#include <array>
#include <functional>
#include <initializer_list>
#include <memory>
#include <span>
#include <string>

#include "maxctx/mesh/axis.h"
#include "maxctx/mesh/communicator.h"
#include "maxctx/mesh/mesh_shape.h"

namespace maxctx {

// The name a group's communicator carries in traces and traffic counts (traffic.h), in a mesh of
// these axis sizes: the group's axes of size > 1 joined by '+' ("data+context"); "self" when
// none is (the group is this rank alone, and moves nothing).
std::string group_trace_name(const AxisArray& sizes, std::span<const Axis> axes);

class Mesh {
 public:
  // Collective over Communicator::world(). Throws maxctx::Error (on every rank alike) when the spec
  // does not fit the ranks and nodes.
  explicit Mesh(const MeshSpec& spec);
  // The same over the ranks of `base` (Communicator::self() gives a one-device mesh inside a
  // multi-rank job: the single-device reference of the equality tests).
  Mesh(const MeshSpec& spec, Communicator base);

  Mesh(Mesh&&) = default;
  Mesh& operator=(Mesh&&) = default;

  const MeshShape& shape() const { return shape_; }
  int64_t axis_size(Axis axis) const { return shape_.axis_size(axis); }
  int64_t coord(Axis axis) const { return coords_[axis_index(axis)]; }
  const AxisArray& coords() const { return coords_; }

  int64_t num_nodes() const { return shape_.num_nodes; }
  int64_t node_index() const { return node_index_; }
  int64_t local_rank() const { return local_rank_; }
  int world_rank() const { return world_.rank(); }
  int world_size() const { return world_.size(); }
  const std::string& hostname() const { return hostname_; }

  const Communicator& world() const { return world_; }
  const Communicator& axis(Axis axis) const { return group({axis}); }
  const Communicator& group(std::initializer_list<Axis> axes) const {
    return group(std::span<const Axis>(axes.begin(), axes.size()));
  }
  const Communicator& group(std::span<const Axis> axes) const;  // order of `axes` is irrelevant

  // Gives the world and every group a backend for device memory (Communicator::
  // set_device_collectives): make(group) is called on every rank for each group in the same
  // order (it may be collective over the group). mesh/device_collectives.h is the caller.
  void set_device_collectives(
      const std::function<std::shared_ptr<CommunicatorImpl>(const Communicator&)>& make);

 private:
  static constexpr int kNumGroups = 1 << kNumAxes;

  MeshShape shape_;
  AxisArray coords_{};
  int64_t node_index_ = 0;
  int64_t local_rank_ = 0;
  std::string hostname_;
  Communicator world_;
  // Bit a of the index = axis a is in the group. Only indices without size-1 axes are filled;
  // index 0 is this rank alone.
  std::array<Communicator, kNumGroups> groups_;
  unsigned nontrivial_axes_ = 0;  // bit a set when axis a has size > 1
};

// Collective. On world rank 0: one line per rank (world rank, host, node, local rank, coordinate
// on every axis) and a line with every axis size; on the other ranks an empty string.
std::string mesh_report(const Mesh& mesh);

}  // namespace maxctx

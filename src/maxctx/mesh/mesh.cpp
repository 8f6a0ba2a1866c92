// Mesh construction (see mesh.h): find the nodes, resolve the shape, place this rank, split the
// communicators. Every step that can fail decides from data every rank holds (the spec and the
// gathered node table), so all ranks throw together and none waits in a collective.
//
// Finding the nodes and the host name is bootstrap, and MPI is the bootstrap: those two steps
// reach the MPI_Comm under the base communicator (mpi/mpi_communicator.h). Everything after them
// goes through Communicator's verbs.
#include "maxctx/mesh/mesh.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <bit>
#include <string>
#include <string_view>
#include <vector>

#include "maxctx/core/check.h"
#include "maxctx/mesh/mpi/mpi_communicator.h"

namespace maxctx {
namespace {

struct Placement {
  int64_t num_nodes = 1;
  int64_t ranks_per_node = 1;
  int64_t node_index = 0;
  int64_t local_rank = 0;
};

// Simulated nodes: contiguous blocks of world rank.
Placement simulated_placement(const Communicator& world, int simulated_nodes) {
  if (world.size() % simulated_nodes != 0) {
    fail("mesh: simulated_nodes={} does not divide the {} ranks; use a divisor of {}",
         simulated_nodes, world.size(), world.size());
  }
  Placement placement;
  placement.num_nodes = simulated_nodes;
  placement.ranks_per_node = world.size() / simulated_nodes;
  placement.node_index = world.rank() / placement.ranks_per_node;
  placement.local_rank = world.rank() % placement.ranks_per_node;
  return placement;
}

// Real nodes: the ranks that share memory. Nodes are numbered by their lowest world rank, ranks
// within a node by world rank.
Placement detected_placement(const Communicator& world) {
  MPI_Comm shared = MPI_COMM_NULL;
  MPI_Comm_split_type(mpi_comm(world), MPI_COMM_TYPE_SHARED, world.rank(), MPI_INFO_NULL, &shared);
  const Communicator node = adopt_mpi_comm(shared);
  // The key above orders a node's ranks by world rank, so its local rank 0 is its lowest.
  int64_t leader = world.rank();
  node.broadcast<int64_t>({&leader, 1}, 0);
  // (leader world rank, ranks on that node) for every world rank.
  const int64_t mine[2] = {leader, node.size()};
  std::vector<int64_t> table(2 * world.size());
  world.all_gather<int64_t>(mine, table);

  std::vector<int64_t> leaders;
  for (int r = 0; r < world.size(); ++r) leaders.push_back(table[2 * r]);
  std::sort(leaders.begin(), leaders.end());
  leaders.erase(std::unique(leaders.begin(), leaders.end()), leaders.end());
  std::string counts;
  bool equal = true;
  for (size_t n = 0; n < leaders.size(); ++n) {
    const int64_t count = table[2 * leaders[n] + 1];
    equal = equal && count == table[1];
    counts += fmt::format("{}node {} ({}): {} ranks", n == 0 ? "" : ", ", n, leaders[n], count);
  }
  if (!equal) {
    fail(
        "mesh: nodes hold different numbers of ranks ({}, by node and lowest world rank); "
        "launch the same number of ranks on every node",
        counts);
  }
  Placement placement;
  placement.num_nodes = static_cast<int64_t>(leaders.size());
  placement.ranks_per_node = node.size();
  placement.node_index = std::lower_bound(leaders.begin(), leaders.end(), leader) - leaders.begin();
  placement.local_rank = node.rank();
  return placement;
}

std::string processor_name() {
  char name[MPI_MAX_PROCESSOR_NAME] = {};
  int length = 0;
  MPI_Get_processor_name(name, &length);
  return std::string(name, length);
}

unsigned axis_bit(Axis axis) { return 1u << axis_index(axis); }

// A group's axes joined by '+' ("data+context"): its name in traces and, as "axis data" or
// "axes fsdp+context", in the collective watchdog's messages.
std::string group_axes(unsigned mask) {
  std::vector<std::string_view> names;
  for (Axis axis : kAllAxes) {
    if ((mask & axis_bit(axis)) != 0) names.push_back(axis_name(axis));
  }
  return fmt::format("{}", fmt::join(names, "+"));
}

}  // namespace

std::string group_trace_name(const AxisArray& sizes, std::span<const Axis> axes) {
  unsigned mask = 0;
  for (Axis axis : axes) {
    if (sizes[axis_index(axis)] > 1) mask |= axis_bit(axis);
  }
  return mask == 0 ? "self" : group_axes(mask);
}

Mesh::Mesh(const MeshSpec& spec) : Mesh(spec, Communicator::world()) {}

Mesh::Mesh(const MeshSpec& spec, Communicator base) : world_(std::move(base)) {
  MAXCTX_CHECK_GE(spec.simulated_nodes, 0, "simulated_nodes: 0 detects nodes, K > 0 simulates K");
  const Placement placement = spec.simulated_nodes > 0
                                  ? simulated_placement(world_, spec.simulated_nodes)
                                  : detected_placement(world_);
  shape_ = resolve_mesh_shape(spec, placement.num_nodes, placement.ranks_per_node);
  node_index_ = placement.node_index;
  local_rank_ = placement.local_rank;
  coords_ = mesh_coords(shape_, node_index_, local_rank_);
  hostname_ = processor_name();

  const AxisArray sizes = shape_.axis_sizes();
  for (Axis axis : kAllAxes) {
    if (sizes[axis_index(axis)] > 1) nontrivial_axes_ |= axis_bit(axis);
  }
  groups_[0] = Communicator::self();
  const unsigned all_axes = kNumGroups - 1;
  for (unsigned mask = 1; mask < kNumGroups; ++mask) {
    if ((mask & ~nontrivial_axes_) != 0) continue;
    // Same color = same coordinates off the group's axes; key = index over the group's axes.
    const int64_t color = masked_linear_index(coords_, sizes, all_axes & ~mask);
    const int64_t key = masked_linear_index(coords_, sizes, mask);
    groups_[mask] = world_.split(static_cast<int>(color), static_cast<int>(key));
    const std::string axes = group_axes(mask);
    groups_[mask].set_trace_name(axes);
    groups_[mask].impl()->set_label(
        fmt::format("{} {}", std::popcount(mask) == 1 ? "axis" : "axes", axes));
    MAXCTX_CHECK_EQ(static_cast<int64_t>(groups_[mask].rank()), key,
                    "a group's rank is the row-major index over its axes");
  }
}

const Communicator& Mesh::group(std::span<const Axis> axes) const {
  unsigned mask = 0;
  for (Axis axis : axes) mask |= axis_bit(axis);
  return groups_[mask & nontrivial_axes_];
}

void Mesh::set_device_collectives(
    const std::function<std::shared_ptr<CommunicatorImpl>(const Communicator&)>& make) {
  world_.set_device_collectives(make(world_));
  for (Communicator& group : groups_) {
    if (group.impl() != nullptr) group.set_device_collectives(make(group));
  }
}

std::string mesh_report(const Mesh& mesh) {
  const Communicator& world = mesh.world();
  // Per rank: world rank, node index, local rank, the coordinates; then the host name.
  constexpr int kFields = 3 + kNumAxes;
  std::vector<int64_t> mine = {mesh.world_rank(), mesh.node_index(), mesh.local_rank()};
  mine.insert(mine.end(), mesh.coords().begin(), mesh.coords().end());
  std::vector<int64_t> rows(static_cast<size_t>(kFields) * world.size());
  world.all_gather<int64_t>(mine, rows);
  constexpr int kHostBytes = MPI_MAX_PROCESSOR_NAME;
  std::vector<uint8_t> my_host(kHostBytes, 0);
  std::copy_n(mesh.hostname().begin(), std::min<size_t>(mesh.hostname().size(), kHostBytes - 1),
              my_host.begin());
  std::vector<uint8_t> hosts(static_cast<size_t>(kHostBytes) * world.size());
  world.all_gather<uint8_t>(my_host, hosts);
  if (world.rank() != 0) return "";

  std::vector<std::string> host_names;
  size_t host_width = 4;
  for (int r = 0; r < world.size(); ++r) {
    host_names.emplace_back(reinterpret_cast<const char*>(hosts.data()) + r * kHostBytes);
    host_width = std::max(host_width, host_names.back().size());
  }
  std::string report =
      fmt::format("{:>4}  {:<{}}  {:>4}  {:>5}", "rank", "host", host_width, "node", "local");
  for (Axis axis : kAllAxes) report += fmt::format("  {}", axis_name(axis));
  report += "\n";
  for (int r = 0; r < world.size(); ++r) {
    const int64_t* row = rows.data() + static_cast<size_t>(kFields) * r;
    report += fmt::format("{:>4}  {:<{}}  {:>4}  {:>5}", row[0], host_names[r], host_width, row[1],
                          row[2]);
    for (Axis axis : kAllAxes) {
      report += fmt::format("  {:>{}}", row[3 + axis_index(axis)], axis_name(axis).size());
    }
    report += "\n";
  }
  report += fmt::format("axis sizes ({} ranks on {} node{}):", world.size(), mesh.num_nodes(),
                        mesh.num_nodes() == 1 ? "" : "s");
  for (Axis axis : kAllAxes) {
    report += fmt::format(" {}={}", axis_name(axis), mesh.axis_size(axis));
  }
  report += "\n";
  return report;
}

}  // namespace maxctx

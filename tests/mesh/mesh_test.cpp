// The Mesh under MPI (1, 2, 4 and 8 ranks): coordinates, the members of axis and group
// communicators (gathered world ranks, in communicator rank order) against hand-written tables,
// simulated multi-node layouts with dcn > 1, errors raised alike on every rank, and the report.
#include "maxctx/mesh/mesh.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "maxctx/core/check.h"

namespace maxctx {
namespace {

constexpr size_t kD = axis_index(Axis::kData);
constexpr size_t kC = axis_index(Axis::kContext);
constexpr size_t kT = axis_index(Axis::kTensor);

int world_size() { return Communicator::world().size(); }
int world_rank() { return Communicator::world().rank(); }

// World ranks of the communicator's members, in communicator rank order.
std::vector<int32_t> members(const Communicator& comm) {
  const int32_t me = world_rank();
  std::vector<int32_t> out(comm.size());
  comm.all_gather<int32_t>({&me, 1}, out);
  return out;
}

using Members = std::vector<std::vector<int32_t>>;  // per world rank

struct GroupTable {
  std::vector<Axis> axes;
  Members members;
};

struct Case {
  MeshSpec spec;
  std::vector<AxisArray> coords;  // per world rank
  std::vector<GroupTable> groups;
};

// Checks the properties every mesh has: coordinates distinct and inside the axes; for every one
// of the 63 axis subsets, a communicator of the right size in which this rank's rank is its
// row-major index over the subset.
void expect_consistent(const Mesh& mesh) {
  const AxisArray sizes = mesh.shape().axis_sizes();
  std::vector<int64_t> all(static_cast<size_t>(kNumAxes) * mesh.world_size());
  mesh.world().all_gather<int64_t>(mesh.coords(), all);
  std::set<std::vector<int64_t>> distinct;
  for (int r = 0; r < mesh.world_size(); ++r) {
    distinct.emplace(all.begin() + r * kNumAxes, all.begin() + (r + 1) * kNumAxes);
  }
  EXPECT_EQ(static_cast<int>(distinct.size()), mesh.world_size());
  for (Axis axis : kAllAxes) {
    EXPECT_GE(mesh.coord(axis), 0);
    EXPECT_LT(mesh.coord(axis), mesh.axis_size(axis));
    EXPECT_EQ(mesh.axis(axis).size(), mesh.axis_size(axis)) << axis_name(axis);
    EXPECT_EQ(mesh.axis(axis).rank(), mesh.coord(axis)) << axis_name(axis);
  }
  for (unsigned mask = 1; mask < (1u << kNumAxes); ++mask) {
    std::vector<Axis> axes;
    int64_t size = 1;
    for (Axis axis : kAllAxes) {
      if (mask & (1u << axis_index(axis))) {
        axes.push_back(axis);
        size *= sizes[axis_index(axis)];
      }
    }
    const Communicator& group = mesh.group(axes);
    EXPECT_EQ(group.size(), size) << "axis mask " << mask;
    EXPECT_EQ(group.rank(), masked_linear_index(mesh.coords(), sizes, mask)) << "mask " << mask;
  }
}

void expect_case(const Case& c) {
  const Mesh mesh(c.spec);
  const int rank = world_rank();
  ASSERT_EQ(static_cast<int>(c.coords.size()), world_size());
  EXPECT_EQ(mesh.coords(), c.coords[rank]);
  expect_consistent(mesh);
  for (const GroupTable& table : c.groups) {
    std::string names;
    for (Axis axis : table.axes) names += std::string(axis_name(axis)) + " ";
    EXPECT_EQ(members(mesh.group(table.axes)), table.members[rank]) << "group " << names;
  }
}

MeshSpec ici(std::initializer_list<std::pair<size_t, int64_t>> factors) {
  MeshSpec spec;
  for (auto [axis, value] : factors) spec.ici[axis] = value;
  return spec;
}

// Coordinates as (data, fsdp, context, context_autoregressive, tensor, expert).
Case ici_case(int ranks) {
  switch (ranks) {
    case 1:
      return {MeshSpec{}, {{0, 0, 0, 0, 0, 0}}, {{{Axis::kData, Axis::kContext}, {{0}}}}};
    case 2:
      return {ici({{kC, 2}}),
              {{0, 0, 0, 0, 0, 0}, {0, 0, 1, 0, 0, 0}},
              {{{Axis::kContext}, {{0, 1}, {0, 1}}},
               {{Axis::kData}, {{0}, {1}}},
               {{Axis::kData, Axis::kContext}, {{0, 1}, {0, 1}}}}};
    case 4:
      return {ici({{kD, 2}, {kC, 2}}),
              {{0, 0, 0, 0, 0, 0}, {0, 0, 1, 0, 0, 0}, {1, 0, 0, 0, 0, 0}, {1, 0, 1, 0, 0, 0}},
              {{{Axis::kData}, {{0, 2}, {1, 3}, {0, 2}, {1, 3}}},
               {{Axis::kContext}, {{0, 1}, {0, 1}, {2, 3}, {2, 3}}},
               {{Axis::kData, Axis::kContext},
                {{0, 1, 2, 3}, {0, 1, 2, 3}, {0, 1, 2, 3}, {0, 1, 2, 3}}}}};
    case 8: {
      const std::vector<int32_t> even = {0, 2, 4, 6}, odd = {1, 3, 5, 7};
      const std::vector<int32_t> low = {0, 1, 2, 3}, high = {4, 5, 6, 7};
      return {ici({{kD, 2}, {kC, 2}, {kT, 2}}),
              {{0, 0, 0, 0, 0, 0},
               {0, 0, 0, 0, 1, 0},
               {0, 0, 1, 0, 0, 0},
               {0, 0, 1, 0, 1, 0},
               {1, 0, 0, 0, 0, 0},
               {1, 0, 0, 0, 1, 0},
               {1, 0, 1, 0, 0, 0},
               {1, 0, 1, 0, 1, 0}},
              {{{Axis::kData}, {{0, 4}, {1, 5}, {2, 6}, {3, 7}, {0, 4}, {1, 5}, {2, 6}, {3, 7}}},
               {{Axis::kContext}, {{0, 2}, {1, 3}, {0, 2}, {1, 3}, {4, 6}, {5, 7}, {4, 6}, {5, 7}}},
               {{Axis::kTensor}, {{0, 1}, {0, 1}, {2, 3}, {2, 3}, {4, 5}, {4, 5}, {6, 7}, {6, 7}}},
               {{Axis::kData, Axis::kContext}, {even, odd, even, odd, even, odd, even, odd}},
               {{Axis::kContext, Axis::kTensor}, {low, low, low, low, high, high, high, high}}}};
    }
  }
  ADD_FAILURE() << "no table for " << ranks << " ranks";
  return {};
}

TEST(MeshTest, IciLayoutMatchesHandTables) { expect_case(ici_case(world_size())); }

// simulated_nodes = 2: world ranks [0, n/2) on node 0, the rest on node 1.
TEST(MeshTest, SimulatedNodesWithDcnMatchHandTables) {
  const int n = world_size();
  MeshSpec spec;
  spec.simulated_nodes = 2;
  if (n == 1) {
    try {
      const Mesh mesh(spec);
      FAIL() << "2 simulated nodes on 1 rank did not fail";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("simulated_nodes=2 does not divide the 1 ranks"),
                std::string::npos)
          << e.what();
    }
    return;
  }
  Case c;
  if (n == 2) {
    spec.dcn[kD] = 2;
    c = {spec, {{0, 0, 0, 0, 0, 0}, {1, 0, 0, 0, 0, 0}}, {{{Axis::kData}, {{0, 1}, {0, 1}}}}};
  } else if (n == 4) {
    spec.dcn[kC] = 2;
    spec.ici[kD] = 2;
    c = {spec,
         {{0, 0, 0, 0, 0, 0}, {1, 0, 0, 0, 0, 0}, {0, 0, 1, 0, 0, 0}, {1, 0, 1, 0, 0, 0}},
         {{{Axis::kContext}, {{0, 2}, {1, 3}, {0, 2}, {1, 3}}},
          {{Axis::kData}, {{0, 1}, {0, 1}, {2, 3}, {2, 3}}},
          {{Axis::kData, Axis::kContext},
           {{0, 2, 1, 3}, {0, 2, 1, 3}, {0, 2, 1, 3}, {0, 2, 1, 3}}}}};
  } else {
    ASSERT_EQ(n, 8);
    spec.dcn[kC] = 2;
    spec.ici[kD] = 2;
    spec.ici[kC] = 2;
    const std::vector<int32_t> data0 = {0, 1, 4, 5}, data1 = {2, 3, 6, 7};
    const std::vector<int32_t> all = {0, 1, 4, 5, 2, 3, 6, 7};
    c = {spec,
         {{0, 0, 0, 0, 0, 0},
          {0, 0, 1, 0, 0, 0},
          {1, 0, 0, 0, 0, 0},
          {1, 0, 1, 0, 0, 0},
          {0, 0, 2, 0, 0, 0},
          {0, 0, 3, 0, 0, 0},
          {1, 0, 2, 0, 0, 0},
          {1, 0, 3, 0, 0, 0}},
         {{{Axis::kContext}, {data0, data0, data1, data1, data0, data0, data1, data1}},
          {{Axis::kData}, {{0, 2}, {1, 3}, {0, 2}, {1, 3}, {4, 6}, {5, 7}, {4, 6}, {5, 7}}},
          {{Axis::kData, Axis::kContext}, {all, all, all, all, all, all, all, all}}}};
  }
  expect_case(c);
  const Mesh mesh(spec);
  EXPECT_EQ(mesh.num_nodes(), 2);
  EXPECT_EQ(mesh.node_index(), world_rank() / (n / 2));
  EXPECT_EQ(mesh.local_rank(), world_rank() % (n / 2));
}

TEST(MeshTest, GroupIgnoresOrderAndSizeOneAxes) {
  const Mesh mesh(ici({{kD, -1}}));
  EXPECT_EQ(mesh.axis_size(Axis::kData), world_size());
  EXPECT_EQ(&mesh.group({Axis::kContext, Axis::kData}), &mesh.group({Axis::kData, Axis::kContext}));
  EXPECT_EQ(&mesh.group({Axis::kData, Axis::kFsdp, Axis::kContext}), &mesh.axis(Axis::kData));
  EXPECT_EQ(mesh.axis(Axis::kTensor).size(), 1);
  EXPECT_EQ(mesh.world().size(), world_size());
}

// On one host (all host names equal) the shared-memory split finds one node holding every rank,
// in world-rank order.
TEST(MeshTest, DetectedNodesPlaceRanksByWorldRank) {
  const Mesh mesh(ici({{kD, -1}}));
  ASSERT_FALSE(mesh.hostname().empty());
  constexpr size_t kNameBytes = 256;
  std::vector<uint8_t> name(kNameBytes, 0);
  std::copy_n(mesh.hostname().begin(), std::min(mesh.hostname().size(), kNameBytes - 1),
              name.begin());
  std::vector<uint8_t> names(kNameBytes * world_size());
  mesh.world().all_gather<uint8_t>(name, names);
  bool one_host = true;
  for (int r = 0; r < world_size(); ++r) {
    one_host = one_host && std::equal(name.begin(), name.end(), names.begin() + kNameBytes * r);
  }
  EXPECT_EQ(mesh.num_nodes() * mesh.shape().ranks_per_node, world_size());
  if (!one_host) GTEST_SKIP() << "ranks on several hosts";
  EXPECT_EQ(mesh.num_nodes(), 1);
  EXPECT_EQ(mesh.node_index(), 0);
  EXPECT_EQ(mesh.local_rank(), world_rank());
  EXPECT_EQ(mesh.coord(Axis::kData), world_rank());
}

// Every rank reaches the same verdict, so every rank throws and none is left in a collective.
TEST(MeshTest, ProductMismatchThrowsOnEveryRank) {
  try {
    const Mesh mesh(ici({{kD, 2}, {kC, 3}}));
    FAIL() << "ici data=2 x context=3 accepted on " << world_size() << " ranks";
  } catch (const Error& e) {
    const std::string message = e.what();
    EXPECT_EQ(message.find('\n'), std::string::npos) << message;
    EXPECT_NE(message.find("ici parallelism product is 6"), std::string::npos) << message;
    EXPECT_NE(message.find(fmt::format("each node has {} rank", world_size())), std::string::npos)
        << message;
  }
  const Mesh after(MeshSpec{.ici = {-1, 1, 1, 1, 1, 1}});  // the world still works
  EXPECT_EQ(after.axis_size(Axis::kData), world_size());
}

TEST(MeshTest, ReportHasOneLinePerRankAndTheAxisSizes) {
  MeshSpec spec = ici({{kC, -1}});
  spec.simulated_nodes = 1;  // node 0, local rank = world rank, on any cluster
  const Mesh mesh(spec);
  const std::string report = mesh_report(mesh);
  if (world_rank() != 0) {
    EXPECT_EQ(report, "");
    return;
  }
  std::vector<std::string> lines;
  size_t begin = 0;
  for (size_t end; (end = report.find('\n', begin)) != std::string::npos; begin = end + 1) {
    lines.push_back(report.substr(begin, end - begin));
  }
  ASSERT_EQ(static_cast<int>(lines.size()), world_size() + 2) << report;
  EXPECT_NE(lines[0].find("rank"), std::string::npos);
  EXPECT_NE(lines[0].find("context_autoregressive"), std::string::npos);
  for (int r = 0; r < world_size(); ++r) {
    // rank host node local data fsdp context context_autoregressive tensor expert
    std::istringstream row(lines[r + 1]);
    std::vector<std::string> fields;
    for (std::string field; row >> field;) fields.push_back(field);
    const std::string i = std::to_string(r);
    EXPECT_EQ(fields,
              (std::vector<std::string>{i, mesh.hostname(), "0", i, "0", "0", i, "0", "0", "0"}))
        << lines[r + 1];
  }
  EXPECT_NE(
      lines.back().find(fmt::format(
          "data=1 fsdp=1 context={} context_autoregressive=1 tensor=1 expert=1", world_size())),
      std::string::npos)
      << lines.back();
}

}  // namespace
}  // namespace maxctx

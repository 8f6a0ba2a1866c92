// Mesh shape resolution and rank layout, pure arithmetic on one rank: -1 filling, every error with
// the numbers its message must name, and coordinate tables computed by hand.
#include "maxctx/mesh/mesh_shape.h"

#include <gtest/gtest.h>

#include <initializer_list>
#include <string>
#include <vector>

#include "maxctx/core/check.h"

namespace maxctx {
namespace {

constexpr size_t kD = axis_index(Axis::kData);
constexpr size_t kF = axis_index(Axis::kFsdp);
constexpr size_t kC = axis_index(Axis::kContext);
constexpr size_t kCA = axis_index(Axis::kContextAutoregressive);
constexpr size_t kT = axis_index(Axis::kTensor);
constexpr size_t kE = axis_index(Axis::kExpert);

// The message of the maxctx::Error that resolving throws ("" if none).
std::string error_of(const MeshSpec& spec, int64_t nodes, int64_t ranks_per_node) {
  try {
    resolve_mesh_shape(spec, nodes, ranks_per_node);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

void expect_error(const MeshSpec& spec, int64_t nodes, int64_t ranks_per_node,
                  std::initializer_list<const char*> parts) {
  const std::string message = error_of(spec, nodes, ranks_per_node);
  ASSERT_FALSE(message.empty()) << "no error for " << nodes << " nodes x " << ranks_per_node;
  EXPECT_EQ(message.find('\n'), std::string::npos) << "not one line: " << message;
  EXPECT_EQ(message.rfind("mesh: ", 0), 0u) << message;
  for (const char* part : parts) {
    EXPECT_NE(message.find(part), std::string::npos) << "missing '" << part << "' in: " << message;
  }
}

TEST(AxisTest, NamesAndOrderAreMaxTexts) {
  const std::vector<std::string> names = {"data",   "fsdp",  "context", "context_autoregressive",
                                          "tensor", "expert"};
  ASSERT_EQ(kAllAxes.size(), names.size());
  for (int a = 0; a < kNumAxes; ++a) {
    EXPECT_EQ(axis_index(kAllAxes[a]), static_cast<size_t>(a));
    EXPECT_EQ(axis_name(kAllAxes[a]), names[a]);
  }
}

TEST(MeshShapeTest, AllOnesOnOneRank) {
  const MeshShape shape = resolve_mesh_shape(MeshSpec{}, 1, 1);
  EXPECT_EQ(shape.axis_sizes(), kAllOnes);
  EXPECT_EQ(shape.num_ranks(), 1);
}

TEST(MeshShapeTest, MinusOneFillsIci) {
  MeshSpec spec;
  spec.ici[kD] = 2;
  spec.ici[kC] = -1;
  const MeshShape shape = resolve_mesh_shape(spec, 1, 8);
  EXPECT_EQ(shape.ici, (AxisArray{2, 1, 4, 1, 1, 1}));
  EXPECT_EQ(shape.axis_size(Axis::kContext), 4);
}

TEST(MeshShapeTest, MinusOneFillsDcnAndIciTogether) {
  MeshSpec spec;
  spec.dcn[kD] = -1;
  spec.ici[kT] = 2;
  spec.ici[kF] = -1;
  const MeshShape shape = resolve_mesh_shape(spec, 3, 4);
  EXPECT_EQ(shape.dcn, (AxisArray{3, 1, 1, 1, 1, 1}));
  EXPECT_EQ(shape.ici, (AxisArray{1, 2, 1, 1, 2, 1}));
  EXPECT_EQ(shape.axis_sizes(), (AxisArray{3, 2, 1, 1, 2, 1}));
  EXPECT_EQ(shape.num_ranks(), 12);
}

TEST(MeshShapeTest, MinusOneMayFillOne) {
  MeshSpec spec;
  spec.ici[kE] = -1;
  spec.ici[kD] = 4;
  EXPECT_EQ(resolve_mesh_shape(spec, 1, 4).ici[kE], 1);
}

TEST(MeshShapeTest, IciProductMismatchNamesProductAndRanks) {
  MeshSpec spec;
  spec.ici[kD] = 2;
  spec.ici[kF] = 1;
  spec.ici[kC] = 3;
  expect_error(spec, 1, 4,
               {"ici parallelism product is 6",
                "(data=2 x fsdp=1 x context=3 x context_autoregressive=1 x tensor=1 x expert=1)",
                "each node has 4 ranks", "product is 4", "-1"});
}

TEST(MeshShapeTest, DcnProductMismatchNamesProductAndNodes) {
  MeshSpec spec;
  spec.dcn[kD] = 3;
  expect_error(spec, 2, 1,
               {"dcn parallelism product is 3", "data=3 x fsdp=1", "there are 2 nodes",
                "dcn_*_parallelism", "product is 2"});
  spec.dcn[kD] = 1;
  spec.dcn[kT] = 2;
  expect_error(spec, 1, 1, {"dcn parallelism product is 2", "there is 1 node;"});
}

TEST(MeshShapeTest, MinusOneThatDoesNotDivide) {
  MeshSpec spec;
  spec.ici[kD] = 3;
  spec.ici[kC] = -1;
  expect_error(spec, 1, 4,
               {"ici_context_parallelism is -1", "multiply to 3", "data=3 x", "4 ranks per node"});
  MeshSpec dcn_spec;
  dcn_spec.dcn[kCA] = 2;
  dcn_spec.dcn[kD] = -1;
  expect_error(dcn_spec, 3, 1, {"dcn_data_parallelism is -1", "multiply to 2", "3 nodes"});
}

TEST(MeshShapeTest, TwoMinusOnes) {
  MeshSpec spec;
  spec.ici[kD] = -1;
  spec.ici[kC] = -1;
  expect_error(spec, 1, 4,
               {"ici_data_parallelism and ici_context_parallelism are both -1", "4 ranks per node",
                "data=-1 x fsdp=1 x context=-1"});
  MeshSpec dcn_spec;
  dcn_spec.dcn[kF] = -1;
  dcn_spec.dcn[kE] = -1;
  expect_error(dcn_spec, 2, 1, {"dcn_fsdp_parallelism and dcn_expert_parallelism", "2 nodes"});
}

TEST(MeshShapeTest, ZeroAndBelowMinusOne) {
  MeshSpec spec;
  spec.ici[kT] = 0;
  expect_error(spec, 1, 4, {"ici_tensor_parallelism is 0", "tensor=0", "4 ranks per node"});
  spec.ici[kT] = 1;
  spec.ici[kD] = -2;
  expect_error(spec, 1, 4, {"ici_data_parallelism is -2", "4 ranks per node"});
  MeshSpec dcn_spec;
  dcn_spec.dcn[kC] = 0;
  expect_error(dcn_spec, 2, 1, {"dcn_context_parallelism is 0", "2 nodes"});
}

// Coordinates in (data, fsdp, context, context_autoregressive, tensor, expert) order, one row per
// world rank (node-major: world rank = node * ranks_per_node + local rank).
void expect_coords(const MeshShape& shape, const std::vector<AxisArray>& table) {
  ASSERT_EQ(static_cast<int64_t>(table.size()), shape.num_ranks());
  for (int64_t r = 0; r < shape.num_ranks(); ++r) {
    EXPECT_EQ(mesh_coords(shape, r / shape.ranks_per_node, r % shape.ranks_per_node), table[r])
        << "world rank " << r;
  }
}

TEST(MeshLayoutTest, IciDataTwoContextTwoOnFourRanks) {
  MeshSpec spec;
  spec.ici[kD] = 2;
  spec.ici[kC] = 2;
  expect_coords(resolve_mesh_shape(spec, 1, 4),
                {{0, 0, 0, 0, 0, 0}, {0, 0, 1, 0, 0, 0}, {1, 0, 0, 0, 0, 0}, {1, 0, 1, 0, 0, 0}});
}

TEST(MeshLayoutTest, DcnDataTwoIciContextTwoTensorTwo) {
  MeshSpec spec;
  spec.dcn[kD] = 2;
  spec.ici[kC] = 2;
  spec.ici[kT] = 2;
  expect_coords(resolve_mesh_shape(spec, 2, 4), {{0, 0, 0, 0, 0, 0},
                                                 {0, 0, 0, 0, 1, 0},
                                                 {0, 0, 1, 0, 0, 0},
                                                 {0, 0, 1, 0, 1, 0},
                                                 {1, 0, 0, 0, 0, 0},
                                                 {1, 0, 0, 0, 1, 0},
                                                 {1, 0, 1, 0, 0, 0},
                                                 {1, 0, 1, 0, 1, 0}});
}

// context = dcn_coord * ici_context + ici_coord: the node is the outer, slower part of the axis.
TEST(MeshLayoutTest, AxisSplitOverDcnAndIciPutsTheNodeOutermost) {
  MeshSpec spec;
  spec.dcn[kC] = 2;
  spec.ici[kD] = 2;
  spec.ici[kC] = 2;
  const MeshShape shape = resolve_mesh_shape(spec, 2, 4);
  EXPECT_EQ(shape.axis_sizes(), (AxisArray{2, 1, 4, 1, 1, 1}));
  expect_coords(shape, {{0, 0, 0, 0, 0, 0},
                        {0, 0, 1, 0, 0, 0},
                        {1, 0, 0, 0, 0, 0},
                        {1, 0, 1, 0, 0, 0},
                        {0, 0, 2, 0, 0, 0},
                        {0, 0, 3, 0, 0, 0},
                        {1, 0, 2, 0, 0, 0},
                        {1, 0, 3, 0, 0, 0}});
}

TEST(MeshLayoutTest, MaskedLinearIndexIsRowMajorInCanonicalOrder) {
  const AxisArray coords = {1, 0, 2, 0, 1, 0};
  const AxisArray sizes = {2, 1, 4, 1, 2, 1};
  const unsigned data = 1u << kD, context = 1u << kC, tensor = 1u << kT;
  EXPECT_EQ(masked_linear_index(coords, sizes, data | context), 1 * 4 + 2);
  EXPECT_EQ(masked_linear_index(coords, sizes, context | tensor), 2 * 2 + 1);
  EXPECT_EQ(masked_linear_index(coords, sizes, data | context | tensor), (1 * 4 + 2) * 2 + 1);
  EXPECT_EQ(masked_linear_index(coords, sizes, 0), 0);
}

}  // namespace
}  // namespace maxctx

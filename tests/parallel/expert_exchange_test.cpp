// A mixture of experts over the expert axis (parallel::ExpertAllToAll, model/moe_block.h with
// `experts`) against the same block on one rank: every rank routes its own tokens, holds only
// its experts and exchanges rows with the others. Its output, input gradient and router
// gradient equal the one-rank block's on the same tokens, and each expert's weight gradient
// equals the sum over ranks of the one-rank gradients (its rows come from every rank); fp32,
// 1e-6 norm-relative. Both dispatch paths (sparse, dense without and with dropping), random
// routing and a skewed router that sends every token to rank 0's experts (the other ranks
// receive no rows at all).
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "maxctx/mesh/communicator.h"
#include "maxctx/model/moe_block.h"
#include "maxctx/parallel/expert_parallel.h"
#include "model/model_test_util.h"

namespace maxctx::model {
namespace {

const kernels::Kernels& cpu() { return kernels::backend(Device::kCpu); }

using testing::norm_relative_error;
using testing::random_values;
using testing::small_moe;

constexpr int64_t kE = 16, kF = 24, kX = 4, kB = 2, kS = 6;  // small_moe's E, F and experts

// Router and experts bound on a flat buffer; `held` experts keep their views, the others get
// empty ones (what bind_weights gives another expert rank's experts).
MoeLayerWeights bind(std::vector<float>& flat, int64_t first_held, int64_t held) {
  MoeLayerWeights w;
  float* p = flat.data();
  const auto take = [&p](int64_t rows, int64_t cols, bool keep) {
    TensorView v(p, DType::kF32, Shape{keep ? rows : 0, cols});
    p += rows * cols;
    return v;
  };
  w.router = take(kX, kE, true);
  for (int64_t j = 0; j < kX; ++j) {
    const bool keep = j >= first_held && j < first_held + held;
    w.experts.push_back({take(kF, kE, keep), take(kF, kE, keep), take(kE, kF, keep)});
  }
  return w;
}

struct Result {
  std::vector<float> out, d_x, grads;
  int64_t local_rows = 0;
};

Result run(const LlamaConfig& c, std::vector<float> params, const std::vector<float>& x,
           const std::vector<float>& d_out, parallel::ExpertExchange* experts) {
  const Communicator world = Communicator::world();
  const int64_t held = experts != nullptr ? kX / world.size() : kX;
  const int64_t first = experts != nullptr ? world.rank() * held : 0;
  Result r;
  r.grads.assign(params.size(), 0.0f);
  const MoeLayerWeights w = bind(params, first, held);
  const MoeLayerWeights g = bind(r.grads, first, held);
  const int64_t N = kB * kS;
  r.out.resize(N * kE);
  r.d_x.resize(N * kE);
  const auto view = [&](const std::vector<float>& v) {
    return TensorView(const_cast<float*>(v.data()), DType::kF32, Shape{N, kE});
  };
  MoeBuffers buffers;
  MoeGradBuffers grad_buffers;
  moe_forward(cpu(), c, w, kB, kS, view(x), view(r.out), buffers, nullptr, experts);
  moe_backward(cpu(), c, w, g, kB, kS, view(x), view(d_out), view(r.d_x), buffers, grad_buffers,
               1.0f, nullptr, experts);
  r.local_rows = buffers.local_rows;
  return r;
}

void expect_matches_one_rank(const LlamaConfig& c, bool skewed) {
  const Communicator world = Communicator::world();
  const int rank = world.rank();
  std::vector<float> params = random_values(kX * kE + kX * 3 * kF * kE, 1, 0.25f);
  std::vector<float> x = random_values(kB * kS * kE, 100 + rank, 1.0f);
  if (skewed) {
    // Positive inputs, experts 0 and 1 with positive router rows, the rest negative: every
    // token chooses experts 0 and 1, which rank 0 holds.
    for (float& v : x) v = std::fabs(v) + 0.1f;
    for (int64_t j = 0; j < kX; ++j) {
      for (int64_t i = 0; i < kE; ++i) {
        float& v = params[j * kE + i];
        v = (j < 2 ? 1.0f : -1.0f) * (std::fabs(v) + 0.1f);
      }
    }
  }
  const std::vector<float> d_out = random_values(kB * kS * kE, 200 + rank, 1.0f);
  const Result one = run(c, params, x, d_out, nullptr);
  parallel::ExpertAllToAll exchange(world, cpu().stream());
  const Result split = run(c, params, x, d_out, &exchange);

  const int64_t n = kB * kS * kE;
  EXPECT_LT(norm_relative_error(split.out.data(), one.out.data(), n), 1e-6);
  EXPECT_LT(norm_relative_error(split.d_x.data(), one.d_x.data(), n), 1e-6);
  EXPECT_LT(norm_relative_error(split.grads.data(), one.grads.data(), kX * kE), 1e-6) << "router";
  // An expert's gradient: the one-rank gradients of every rank's tokens, summed.
  std::vector<float> summed = one.grads;
  world.all_reduce<float>(summed, ReduceOp::kSum);
  const int64_t held = kX / world.size();
  const int64_t expert_size = 3 * kF * kE;
  for (int64_t j = rank * held; j < (rank + 1) * held; ++j) {
    const int64_t at = kX * kE + j * expert_size;
    EXPECT_LT(norm_relative_error(split.grads.data() + at, summed.data() + at, expert_size), 1e-6)
        << "expert " << j;
  }
  if (skewed && c.sparse_matmul) {
    // Every token's two choices are experts 0 and 1: their ranks receive every rank's tokens,
    // the others nothing (dense dispatch sends its empty slots too, so only sparse is counted).
    int64_t expected = 0;
    for (int64_t j = rank * held; j < (rank + 1) * held; ++j) {
      if (j < 2) expected += world.size() * kB * kS;
    }
    EXPECT_EQ(split.local_rows, expected) << "rank " << rank;
  }
}

class ExpertExchangeTest : public ::testing::TestWithParam<std::tuple<bool, double, bool>> {};

TEST_P(ExpertExchangeTest, MatchesTheBlockOnOneRank) {
  if (Communicator::world().size() == 1 || kX % Communicator::world().size() != 0) {
    GTEST_SKIP() << "needs 2 or 4 ranks";
  }
  const auto [sparse, capacity_factor, skewed] = GetParam();
  expect_matches_one_rank(small_moe(sparse, capacity_factor), skewed);
}

INSTANTIATE_TEST_SUITE_P(Dispatch, ExpertExchangeTest,
                         ::testing::Combine(::testing::Values(true, false),
                                            ::testing::Values(-1.0, 0.5),
                                            ::testing::Values(false, true)));

}  // namespace
}  // namespace maxctx::model

// Context-parallel attention against the single-device run, one table of cases (STYLE.md 8):
// strategy (all_gather, ring) × load balance (on, off) × heads (MHA, GQA, MQA) × mask (causal,
// packed documents, sliding window, packed + window), for cp = the number of ranks (ctest runs
// this binary on 1, 2, 3 and 4 ranks). Every rank builds the whole problem from the counter-based
// RNG, runs the unsharded reference (LocalAttention), takes its own tokens by the dual chunk
// swap, runs the context-parallel plan, and compares its rows of out, lse, dq, dk and dv with the
// reference rows of the same tokens: 1e-5 norm-relative (max |a−b| / max |ref|), fp32.
#include "maxctx/parallel/context_attention.h"

#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "maxctx/core/rng.h"
#include "maxctx/mesh/communicator.h"
#include "maxctx/parallel/load_balance.h"
#include "maxctx/parallel/local_attention.h"

namespace maxctx::parallel {
namespace {

enum class Mask { kCausal, kPacked, kWindow, kPackedWindow };

struct Case {
  const char* strategy;  // "all_gather" or "ring"
  bool load_balance;
  int64_t heads_q, heads_kv;
  Mask mask;
  int64_t seq = 48;  // divisible by 2·cp for cp = 1..4
  int64_t head_dim = 16;
  int64_t batch = 2;
};

std::string case_name(const Case& c) {
  const char* masks[] = {"causal", "packed", "window", "packed_window"};
  return std::string(c.strategy) + (c.load_balance ? "_lb" : "_nolb") + "_h" +
         std::to_string(c.heads_q) + "_kv" + std::to_string(c.heads_kv) + "_" +
         masks[static_cast<int>(c.mask)] + "_s" + std::to_string(c.seq);
}

// Whole-sequence data, identical on every rank.
struct Problem {
  int64_t B, S, Hq, Hkv, D;
  std::vector<float> q, k, v, d_out;         // token-major (B, S, H, D)
  std::vector<int32_t> positions, segments;  // (B, S)
};

Problem make_problem(const Case& c) {
  Problem p{c.batch, c.seq, c.heads_q, c.heads_kv, c.head_dim, {}, {}, {}, {}, {}, {}};
  const int64_t N = p.B * p.S;
  p.q.resize(N * p.Hq * p.D);
  p.k.resize(N * p.Hkv * p.D);
  p.v.resize(N * p.Hkv * p.D);
  p.d_out.resize(N * p.Hq * p.D);
  rng::fill_normal(p.q, 1, 1, 0, 0.0f, 1.0f);
  rng::fill_normal(p.k, 1, 2, 0, 0.0f, 1.0f);
  rng::fill_normal(p.v, 1, 3, 0, 0.0f, 1.0f);
  rng::fill_normal(p.d_out, 1, 4, 0, 0.0f, 1.0f);
  const bool packed = c.mask == Mask::kPacked || c.mask == Mask::kPackedWindow;
  for (int64_t b = 0; b < p.B; ++b) {
    // Packed rows: documents of 17, 9, 13 tokens, the rest a last document (row 0) or
    // padding (segment 0, row 1); documents straddle the context chunks on purpose.
    const int64_t lengths[] = {17, 9, 13};
    int32_t segment = 1;
    int32_t position = 0;
    int64_t left = lengths[0];
    int doc = 0;
    for (int64_t s = 0; s < p.S; ++s) {
      if (packed && left == 0) {
        ++doc;
        ++segment;
        position = 0;
        left = doc < 3 ? lengths[doc] : p.S;
      }
      const bool padding = packed && b == 1 && doc >= 3;
      p.segments.push_back(padding ? 0 : segment);
      p.positions.push_back(position++);
      --left;
    }
  }
  return p;
}

kernels::AttentionParams dims_of(const Case& c) {
  kernels::AttentionParams d;
  d.heads_q = c.heads_q;
  d.heads_kv = c.heads_kv;
  d.head_dim = c.head_dim;
  d.sliding_window = c.mask == Mask::kWindow || c.mask == Mask::kPackedWindow ? 5 : 0;
  return d;
}

// Rows `indices` of every sequence of a (B, S, row) tensor.
template <typename T>
std::vector<T> take_rows(const std::vector<T>& full, int64_t B, int64_t S, int64_t row,
                         const std::vector<int64_t>& indices) {
  std::vector<T> out;
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t i : indices) {
      out.insert(out.end(), full.begin() + (b * S + i) * row, full.begin() + (b * S + i + 1) * row);
    }
  }
  return out;
}

TensorView view(const std::vector<float>& values) {
  return TensorView::of(values.data(), static_cast<int64_t>(values.size()));
}

double norm_relative_error(const std::vector<float>& a, const std::vector<float>& ref) {
  double diff = 0.0, scale = 0.0;
  for (size_t i = 0; i < a.size(); ++i) {
    diff = std::max(diff, std::fabs(double(a[i]) - ref[i]));
    scale = std::max(scale, std::fabs(double(ref[i])));
  }
  return scale == 0.0 ? diff : diff / scale;
}

class ContextAttention : public ::testing::TestWithParam<Case> {};

TEST_P(ContextAttention, EachRankMatchesTheSingleDeviceRows) {
  const Case c = GetParam();
  const Communicator world = Communicator::world();
  const int64_t cp = world.size();
  const Problem p = make_problem(c);
  const kernels::AttentionParams dims = dims_of(c);
  const int64_t N = p.B * p.S;

  // The unsharded reference.
  LocalAttention reference(kernels::backend(Device::kCpu));
  const TokenLayout all_tokens{p.B, p.S, p.positions.data(), p.segments.data()};
  std::vector<float> ref_out(N * p.Hq * p.D), ref_lse(p.B * p.Hq * p.S);
  std::vector<float> ref_dq(p.q.size()), ref_dk(p.k.size()), ref_dv(p.v.size());
  reference.forward(view(ref_out), view(ref_lse), view(p.q), view(p.k), view(p.v), all_tokens,
                    dims);
  reference.backward(view(ref_dq), view(ref_dk), view(ref_dv), view(p.d_out), view(ref_out),
                     view(ref_lse), view(p.q), view(p.k), view(p.v), all_tokens, dims);

  // This rank's tokens.
  const std::vector<int64_t> mine = context_shard_indices(p.S, cp, world.rank(), c.load_balance);
  const int64_t S_local = static_cast<int64_t>(mine.size());
  const auto q = take_rows(p.q, p.B, p.S, p.Hq * p.D, mine);
  const auto k = take_rows(p.k, p.B, p.S, p.Hkv * p.D, mine);
  const auto v = take_rows(p.v, p.B, p.S, p.Hkv * p.D, mine);
  const auto d_out = take_rows(p.d_out, p.B, p.S, p.Hq * p.D, mine);
  const auto positions = take_rows(p.positions, p.B, p.S, 1, mine);
  const auto segments = take_rows(p.segments, p.B, p.S, 1, mine);
  const TokenLayout local{p.B, S_local, positions.data(), segments.data()};

  std::unique_ptr<AttentionPlan> plan;
  if (std::string(c.strategy) == "ring") {
    plan = std::make_unique<RingContextAttention>(world, kernels::backend(Device::kCpu));
  } else {
    plan = std::make_unique<AllGatherContextAttention>(world, kernels::backend(Device::kCpu));
  }
  std::vector<float> out(q.size()), lse(p.B * p.Hq * S_local);
  std::vector<float> dq(q.size()), dk(k.size()), dv(v.size());
  plan->forward(view(out), view(lse), view(q), view(k), view(v), local, dims);
  plan->backward(view(dq), view(dk), view(dv), view(d_out), view(out), view(lse), view(q), view(k),
                 view(v), local, dims);

  EXPECT_LT(norm_relative_error(out, take_rows(ref_out, p.B, p.S, p.Hq * p.D, mine)), 1e-5);
  std::vector<float> expected_lse;
  for (int64_t b = 0; b < p.B; ++b) {
    for (int64_t h = 0; h < p.Hq; ++h) {
      for (int64_t i : mine) expected_lse.push_back(ref_lse[(b * p.Hq + h) * p.S + i]);
    }
  }
  EXPECT_LT(norm_relative_error(lse, expected_lse), 1e-5);
  EXPECT_LT(norm_relative_error(dq, take_rows(ref_dq, p.B, p.S, p.Hq * p.D, mine)), 1e-5);
  EXPECT_LT(norm_relative_error(dk, take_rows(ref_dk, p.B, p.S, p.Hkv * p.D, mine)), 1e-5);
  EXPECT_LT(norm_relative_error(dv, take_rows(ref_dv, p.B, p.S, p.Hkv * p.D, mine)), 1e-5);
}

std::vector<Case> all_cases() {
  std::vector<Case> cases;
  for (const char* strategy : {"all_gather", "ring"}) {
    for (bool lb : {true, false}) {
      for (auto [hq, hkv] : {std::pair<int64_t, int64_t>{4, 4}, {4, 2}, {4, 1}}) {
        for (Mask mask : {Mask::kCausal, Mask::kPacked, Mask::kWindow, Mask::kPackedWindow}) {
          cases.push_back({strategy, lb, hq, hkv, mask});
        }
      }
    }
    // Long enough for several kernel tiles per rank, so tile skipping is exercised.
    cases.push_back({strategy, true, 8, 2, Mask::kCausal, 1536, 32, 1});
    cases.push_back({strategy, false, 8, 2, Mask::kPacked, 1536, 32, 1});
  }
  return cases;
}

INSTANTIATE_TEST_SUITE_P(Table, ContextAttention, ::testing::ValuesIn(all_cases()),
                         [](const auto& test_info) { return case_name(test_info.param); });

}  // namespace
}  // namespace maxctx::parallel

// The decode kernel (kernels/cpu/single_query_attention.h) against the reference attention at
// one query row, in double: shuffled cache rows, empty rows (segment 0), rows the query's
// position hides, sliding windows, GQA groups 1..8 (per-head and head-packed scores), head dims
// that are and are not multiples of the vector width, and a query that sees nothing; empty rows
// hold NaN. The int8-cache variant against the reference over the dequantized rows, with NaN
// scales in the empty rows. fp32 bar: 1e-5 norm-relative per head, lse within 1e-5.
#include "maxctx/kernels/cpu/single_query_attention.h"

#include <gtest/gtest.h>

// As in single_query_attention.cpp, so that this file sees the same list of compiled targets.
#ifndef HWY_WANT_AVX3_DL
#define HWY_WANT_AVX3_DL
#endif

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "hwy/targets.h"
#include "maxctx/kernels/cpu/int8.h"
#include "maxctx/kernels/ref/attention.h"
#include "maxctx/kernels/ref/int8.h"

namespace maxctx::kernels {
namespace {

struct Case {
  int64_t batch, seq_k, heads_q, heads_kv, head_dim;
  int32_t window = 0;
};

// out, lse against ref::attention_forward in double over the same q, k, v.
void expect_matches_reference(const std::vector<float>& out, const std::vector<float>& lse,
                              const std::vector<float>& q, const std::vector<float>& k,
                              const std::vector<float>& v, const std::vector<int32_t>& q_pos,
                              const std::vector<int32_t>& q_seg, const std::vector<int32_t>& k_pos,
                              const std::vector<int32_t>& k_seg, const AttentionParams& p) {
  const int64_t B = p.batch, Hq = p.heads_q, D = p.head_dim;
  std::vector<double> qd(q.begin(), q.end()), kd(k.begin(), k.end()), vd(v.begin(), v.end());
  std::vector<double> out_ref(q.size()), lse_ref(B * Hq);
  ref::attention_forward(out_ref.data(), lse_ref.data(), qd.data(), kd.data(), vd.data(),
                         q_pos.data(), q_seg.data(), k_pos.data(), k_seg.data(), p);
  for (int64_t i = 0; i < B * Hq; ++i) {
    double diff = 0.0, scale = 0.0;
    for (int64_t d = 0; d < D; ++d) {
      diff = std::max(diff, std::fabs(out[i * D + d] - out_ref[i * D + d]));
      scale = std::max(scale, std::fabs(out_ref[i * D + d]));
    }
    if (std::isinf(lse_ref[i])) {
      EXPECT_TRUE(std::isinf(lse[i]) && lse[i] < 0) << "head " << i << ": " << lse[i];
      EXPECT_EQ(diff, 0.0) << "head " << i << " sees nothing, out must be 0";
      continue;
    }
    EXPECT_LE(diff, 1e-5 * scale) << "head " << i << " Sk " << p.seq_k << " D " << D;
    EXPECT_NEAR(lse[i], lse_ref[i], 1e-5 * std::max(1.0, std::fabs(lse_ref[i]))) << "head " << i;
  }
}

void check_case(const Case& c, uint32_t seed) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  AttentionParams p;
  p.batch = c.batch;
  p.seq_q = 1;
  p.seq_k = c.seq_k;
  p.heads_q = c.heads_q;
  p.heads_kv = c.heads_kv;
  p.head_dim = c.head_dim;
  p.sliding_window = c.window;
  const int64_t B = c.batch, Sk = c.seq_k, Hq = c.heads_q, D = c.head_dim;
  std::vector<float> q(B * Hq * D), k(B * Sk * c.heads_kv * D), v(k.size());
  for (auto* t : {&q, &k, &v}) {
    for (float& x : *t) x = 2.0f * normal(gen);
  }
  std::vector<int32_t> q_pos(B), q_seg(B, 1), k_pos(B * Sk), k_seg(B * Sk);
  for (int64_t b = 0; b < B; ++b) {
    std::vector<int32_t> positions(Sk);
    std::iota(positions.begin(), positions.end(), 0);
    std::shuffle(positions.begin(), positions.end(), gen);
    for (int64_t j = 0; j < Sk; ++j) {
      k_pos[b * Sk + j] = positions[j];
      k_seg[b * Sk + j] = gen() % 5 == 0 ? 0 : 1;  // about 1 in 5 rows empty
    }
    // Slot 0 sees everything up to its position; slot 1 only part; slot 2 nothing.
    q_pos[b] = b == 0 ? static_cast<int32_t>(Sk) : static_cast<int32_t>(Sk / 2);
    if (b == 2) q_seg[b] = 7;
  }
  // The kernel must never read a row the mask hides: its copy holds NaN in every empty row.
  std::vector<float> k_nan = k, v_nan = v;
  for (int64_t row = 0; row < B * Sk; ++row) {
    if (k_seg[row] != 0) continue;
    const int64_t width = c.heads_kv * D;
    std::fill_n(k_nan.begin() + row * width, width, std::nanf(""));
    std::fill_n(v_nan.begin() + row * width, width, std::nanf(""));
  }
  std::vector<float> out(q.size()), lse(B * Hq);
  cpu::single_query_attention(out.data(), lse.data(), q.data(), k_nan.data(), v_nan.data(),
                              q_pos.data(), q_seg.data(), k_pos.data(), k_seg.data(), p);
  expect_matches_reference(out, lse, q, k, v, q_pos, q_seg, k_pos, k_seg, p);

  // The int8 cache: codes and one scale per row (the KV rule), against the reference over the
  // dequantized rows; empty rows get a NaN scale, so reading one would show.
  const int64_t width = c.heads_kv * D;
  std::vector<int8_t> k_codes(k.size()), v_codes(v.size());
  std::vector<float> k_scale(B * Sk), v_scale(B * Sk);
  cpu::quantize_rows_int8(k_codes.data(), k_scale.data(), k.data(), B * Sk, width, kInt8KvLevels);
  cpu::quantize_rows_int8(v_codes.data(), v_scale.data(), v.data(), B * Sk, width, kInt8KvLevels);
  std::vector<float> k_deq(k.size()), v_deq(v.size());
  cpu::dequantize_rows_int8(k_deq.data(), k_codes.data(), k_scale.data(), B * Sk, width);
  cpu::dequantize_rows_int8(v_deq.data(), v_codes.data(), v_scale.data(), B * Sk, width);
  for (int64_t row = 0; row < B * Sk; ++row) {
    if (k_seg[row] == 0) k_scale[row] = v_scale[row] = std::nanf("");
  }
  cpu::single_query_attention_int8(out.data(), lse.data(), q.data(), k_codes.data(), k_scale.data(),
                                   v_codes.data(), v_scale.data(), q_pos.data(), q_seg.data(),
                                   k_pos.data(), k_seg.data(), p);
  expect_matches_reference(out, lse, q, k_deq, v_deq, q_pos, q_seg, k_pos, k_seg, p);
}

class SingleQueryAttention : public ::testing::TestWithParam<int64_t> {  // a Highway target bit
 protected:
  void SetUp() override { hwy::SetSupportedTargetsForTest(GetParam()); }
  void TearDown() override { hwy::SetSupportedTargetsForTest(0); }
};

// Every target this CPU runs: the row-sum folds differ with the vector width (4, 8, 16 lanes).
TEST_P(SingleQueryAttention, MatchesReference) {
  ASSERT_STREQ(cpu::single_query_attention_simd_target(), hwy::TargetName(GetParam()));
  const Case cases[] = {
      {1, 1, 1, 1, 16},    {3, 1000, 8, 2, 32}, {3, 129, 4, 4, 64},      {3, 300, 8, 2, 24},
      {2, 513, 8, 2, 128}, {3, 257, 4, 1, 16},  {3, 700, 6, 3, 32, 100}, {3, 0, 4, 2, 32},
      {1, 4096, 8, 2, 32}, {2, 333, 12, 2, 64}, {2, 200, 5, 1, 48},      {2, 150, 2, 2, 8},
      {2, 300, 16, 2, 32}, {2, 100, 6, 2, 96},  {2, 77, 14, 2, 32},      {1, 2000, 8, 1, 128},
  };
  uint32_t seed = 1;
  for (const Case& c : cases) {
    SCOPED_TRACE(::testing::Message()
                 << "B " << c.batch << " Sk " << c.seq_k << " Hq " << c.heads_q << " Hkv "
                 << c.heads_kv << " D " << c.head_dim << " window " << c.window);
    check_case(c, seed++);
  }
}

INSTANTIATE_TEST_SUITE_P(Targets, SingleQueryAttention,
                         ::testing::ValuesIn(hwy::SupportedAndGeneratedTargets()),
                         [](const ::testing::TestParamInfo<int64_t>& target) {
                           return std::string(hwy::TargetName(target.param));
                         });

}  // namespace
}  // namespace maxctx::kernels

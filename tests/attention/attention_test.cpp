// Position-masked attention: one table of cases, run against every implementation.
//
// Implementations: ref<float>, cpu on one thread, cpu on two threads (which on a single kv group
// takes the split-key-block backward path). The oracle is ref<double>. Per case and
// implementation: forward and backward against the oracle, backward accumulating (+=), keys cut
// in two chunks (forward merged by log-sum-exp == forward over all keys; chunk backwards with the
// global out/lse sum to the full backward), and the tile counts. The oracle itself is checked
// against central finite differences (small cases) and a dense softmax written here.
//
// Metrics (fp32 against the f64 oracle): out and lse elementwise |a - e| <= 1e-5 · (|e| + rms(e))
// with -inf matching exactly; gradients ||a - e||₂ <= 1e-5 · ||e||₂.
#include "maxctx/kernels/cpu/attention.h"

#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <map>
#include <numeric>
#include <string>
#include <vector>

#include "maxctx/core/rng.h"
#include "maxctx/kernels/ref/attention.h"

namespace maxctx::kernels {
namespace {

constexpr double kTolerance = 1e-5;
constexpr double kNegInf = -std::numeric_limits<double>::infinity();

// How positions and segment ids are laid out over the rows.
enum class Layout {
  kCausal,          // Sq == Sk, positions 0..S-1, one document
  kShuffled,        // kCausal with q rows and k rows each in their own random order
  kPacked,          // several documents per row, positions restarting at each
  kPackedShuffled,  // kPacked, then shuffled
  kQueryChunk,      // queries are a middle chunk of the keys' tokens (Sq < Sk)
  kKeyChunk,        // keys are the last chunk of the queries' tokens: early queries see nothing
  kPrefix,          // every key precedes every query: full visibility
  kDualChunk,       // queries are chunks 0 and 3 of 4 (dual chunk swap, cp = 2, rank 0)
};

// What the tile counts must show, for every implementation.
enum class Skips { kAny, kNone, kSome, kAboutHalf };

struct Case {
  const char* name;
  int64_t batch, seq_q, seq_k, heads_q, heads_kv, head_dim;
  int32_t window;
  Layout layout;
  Skips skips;
};

// clang-format off
const Case kCases[] = {
  // name                        B   Sq    Sk  Hq Hkv   D  window  layout                   skips
  {"mha_causal_tiny",            1,   9,    9,  2,  2,   8,   0, Layout::kCausal,          Skips::kAny},
  {"gqa_packed_shuffled_tiny",   2,  12,   12,  4,  2,   8,   0, Layout::kPackedShuffled,  Skips::kAny},
  {"mqa_window_tiny",            1,  11,   11,  3,  1,   4,   3, Layout::kCausal,          Skips::kAny},
  {"gqa_key_chunk_tiny",         1,  10,    6,  2,  1,   8,   0, Layout::kKeyChunk,        Skips::kAny},
  {"mha_causal_d64",             1, 200,  200,  4,  4,  64,   0, Layout::kCausal,          Skips::kAny},
  {"mha_packed_d72",             1, 190,  190,  3,  3,  72,   0, Layout::kPacked,          Skips::kAny},
  {"gqa_causal_d128",            1, 300,  300,  8,  2, 128,   0, Layout::kCausal,          Skips::kSome},
  {"mqa_causal_d128",            1, 260,  260,  4,  1, 128,   0, Layout::kCausal,          Skips::kSome},
  {"gqa_shuffled_d64",           2, 300,  300,  4,  2,  64,   0, Layout::kShuffled,        Skips::kAny},
  {"gqa_packed_d64",             2, 333,  333,  4,  2,  64,   0, Layout::kPacked,          Skips::kSome},
  {"gqa_window_d64",             1, 400,  400,  4,  2,  64, 100, Layout::kCausal,          Skips::kSome},
  {"gqa_packed_shuffled_win_d16",2, 257,  257,  6,  3,  16,  37, Layout::kPackedShuffled,  Skips::kAny},
  {"gqa_query_chunk_d64",        2, 150,  450,  4,  2,  64,   0, Layout::kQueryChunk,      Skips::kSome},
  {"gqa_key_chunk_d64",          2, 300,  140,  4,  2,  64,   0, Layout::kKeyChunk,        Skips::kSome},
  {"gqa_prefix_d64",             2,  70,  260,  4,  2,  64,   0, Layout::kPrefix,          Skips::kNone},
  {"mqa_dual_chunk_d32",         1, 256,  512,  4,  1,  32,   0, Layout::kDualChunk,       Skips::kSome},
  {"mha_causal_long_d16",        1, 1024, 1024, 2,  2,  16,   0, Layout::kCausal,          Skips::kAboutHalf},
  {"mqa_causal_long_d16",        1, 1024, 1024, 4,  1,  16,   0, Layout::kCausal,          Skips::kAboutHalf},
};
// clang-format on

AttentionParams params_of(const Case& c) {
  AttentionParams p;
  p.batch = c.batch;
  p.seq_q = c.seq_q;
  p.seq_k = c.seq_k;
  p.heads_q = c.heads_q;
  p.heads_kv = c.heads_kv;
  p.head_dim = c.head_dim;
  p.sliding_window = c.window;
  return p;
}

// ---------------------------------------------------------------- inputs

template <typename T>
struct Inputs {
  std::vector<T> q, k, v, d_out;                    // (B,Sq,Hq,D) (B,Sk,Hkv,D) ×2 (B,Sq,Hq,D)
  std::vector<int32_t> q_pos, q_seg, k_pos, k_seg;  // (B,Sq) (B,Sq) (B,Sk) (B,Sk)
};

std::vector<float> normal(int64_t n, uint64_t seed, const char* stream) {
  std::vector<float> values(static_cast<size_t>(n));
  rng::fill_normal(values, seed, rng::stream_id(stream), 0, 0.0f, 1.0f);
  return values;
}

// A random permutation of [0, n) (Fisher-Yates on counter-based draws).
std::vector<int64_t> permutation(int64_t n, uint64_t seed, uint64_t stream) {
  std::vector<int64_t> order(static_cast<size_t>(n));
  std::iota(order.begin(), order.end(), 0);
  for (int64_t i = n - 1; i > 0; --i) {
    const uint64_t j = rng::u32_at(seed, stream, static_cast<uint64_t>(i)) % (i + 1);
    std::swap(order[static_cast<size_t>(i)], order[j]);
  }
  return order;
}

// Positions and segment ids of one batch element (seed differs per element).
void layout_rows(const Case& c, uint64_t seed, int32_t* q_pos, int32_t* q_seg, int32_t* k_pos,
                 int32_t* k_seg) {
  const int64_t Sq = c.seq_q, Sk = c.seq_k;
  auto fill = [](int32_t* pos, int32_t* seg, int64_t n, int64_t first) {
    for (int64_t i = 0; i < n; ++i) {
      pos[i] = static_cast<int32_t>(first + i);
      seg[i] = 0;
    }
  };
  auto shuffle = [&](int32_t* pos, int32_t* seg, int64_t n, uint64_t stream) {
    const auto order = permutation(n, seed, stream);
    std::vector<int32_t> p(pos, pos + n), s(seg, seg + n);
    for (int64_t i = 0; i < n; ++i) {
      pos[i] = p[static_cast<size_t>(order[static_cast<size_t>(i)])];
      seg[i] = s[static_cast<size_t>(order[static_cast<size_t>(i)])];
    }
  };
  switch (c.layout) {
    case Layout::kCausal:
    case Layout::kShuffled:
      fill(q_pos, q_seg, Sq, 0);
      fill(k_pos, k_seg, Sk, 0);
      break;
    case Layout::kPacked:
    case Layout::kPackedShuffled: {
      // Documents of 1..max(2, S/3) tokens; segment ids count up, positions restart.
      int64_t i = 0;
      for (int32_t doc = 0; i < Sq; ++doc) {
        const int64_t bound = std::max<int64_t>(2, Sq / 3);
        const int64_t length = 1 + rng::u32_at(seed, 7, static_cast<uint64_t>(doc)) % bound;
        for (int64_t t = 0; t < length && i < Sq; ++t, ++i) {
          q_pos[i] = k_pos[i] = static_cast<int32_t>(t);
          q_seg[i] = k_seg[i] = doc;
        }
      }
      break;
    }
    case Layout::kQueryChunk:
      fill(q_pos, q_seg, Sq, (Sk - Sq) / 2);
      fill(k_pos, k_seg, Sk, 0);
      break;
    case Layout::kKeyChunk:
      fill(q_pos, q_seg, Sq, 0);
      fill(k_pos, k_seg, Sk, Sq - Sk);
      break;
    case Layout::kPrefix:
      fill(q_pos, q_seg, Sq, Sk);
      fill(k_pos, k_seg, Sk, 0);
      break;
    case Layout::kDualChunk:
      fill(q_pos, q_seg, Sq / 2, 0);
      fill(q_pos + Sq / 2, q_seg + Sq / 2, Sq - Sq / 2, Sk - (Sq - Sq / 2));
      fill(k_pos, k_seg, Sk, 0);
      break;
  }
  if (c.layout == Layout::kShuffled || c.layout == Layout::kPackedShuffled) {
    shuffle(q_pos, q_seg, Sq, 1);
    shuffle(k_pos, k_seg, Sk, 2);
  }
}

template <typename T>
Inputs<T> make_inputs(const Case& c) {
  const AttentionParams p = params_of(c);
  const uint64_t seed = std::hash<std::string>{}(c.name);
  const int64_t q_numel = p.batch * p.seq_q * p.heads_q * p.head_dim;
  const int64_t kv_numel = p.batch * p.seq_k * p.heads_kv * p.head_dim;
  auto to_t = [](const std::vector<float>& x) { return std::vector<T>(x.begin(), x.end()); };
  Inputs<T> in;
  in.q = to_t(normal(q_numel, seed, "q"));
  in.k = to_t(normal(kv_numel, seed, "k"));
  in.v = to_t(normal(kv_numel, seed, "v"));
  in.d_out = to_t(normal(q_numel, seed, "d_out"));
  in.q_pos.resize(static_cast<size_t>(p.batch * p.seq_q));
  in.q_seg.resize(in.q_pos.size());
  in.k_pos.resize(static_cast<size_t>(p.batch * p.seq_k));
  in.k_seg.resize(in.k_pos.size());
  for (int64_t b = 0; b < p.batch; ++b) {
    layout_rows(c, seed + static_cast<uint64_t>(b), in.q_pos.data() + b * p.seq_q,
                in.q_seg.data() + b * p.seq_q, in.k_pos.data() + b * p.seq_k,
                in.k_seg.data() + b * p.seq_k);
  }
  return in;
}

// Rows [begin, end) of every batch element of a (B, S, ...) tensor with `width` values per row.
template <typename V>
std::vector<V> key_rows(const std::vector<V>& x, int64_t batch, int64_t seq, int64_t width,
                        int64_t begin, int64_t end) {
  std::vector<V> chunk;
  for (int64_t b = 0; b < batch; ++b) {
    chunk.insert(chunk.end(), x.begin() + (b * seq + begin) * width,
                 x.begin() + (b * seq + end) * width);
  }
  return chunk;
}

// The inverse of key_rows: writes chunk back into rows [begin, end) of x.
void put_key_rows(std::vector<float>& x, const std::vector<float>& chunk, int64_t batch,
                  int64_t seq, int64_t width, int64_t begin, int64_t end) {
  const int64_t n = (end - begin) * width;
  for (int64_t b = 0; b < batch; ++b) {
    std::copy(chunk.begin() + b * n, chunk.begin() + (b + 1) * n,
              x.begin() + (b * seq + begin) * width);
  }
}

// ---------------------------------------------------------------- implementations

template <typename T>
struct Results {
  std::vector<T> out, lse, dq, dk, dv;
  AttentionStats forward_stats, backward_stats;
};

struct Impl {
  const char* name;
  std::function<void(float*, float*, const float*, const float*, const float*, const int32_t*,
                     const int32_t*, const int32_t*, const int32_t*, const AttentionParams&,
                     AttentionStats*)>
      forward;
  std::function<void(float*, float*, float*, const float*, const float*, const float*, const float*,
                     const float*, const float*, const int32_t*, const int32_t*, const int32_t*,
                     const int32_t*, const AttentionParams&, AttentionStats*)>
      backward;
  std::function<void(float*, float*, const float*, const float*, const float*, const float*,
                     int64_t, int64_t, int64_t, int64_t)>
      merge;
  std::function<int64_t(const AttentionParams&)> total_tiles;
  int threads;
};

int64_t ref_tiles(const AttentionParams& p) { return p.batch * p.heads_kv * p.seq_q * p.seq_k; }
int64_t cpu_tiles(const AttentionParams& p) {
  const cpu::AttentionTiling t = cpu::attention_tiling(p);
  const int64_t n_qb = (p.seq_q + t.block_q - 1) / t.block_q;
  const int64_t n_kb = (p.seq_k + cpu::kAttentionBlockK - 1) / cpu::kAttentionBlockK;
  const int64_t n_chunks = (p.group_size() + t.heads_per_tile - 1) / t.heads_per_tile;
  return p.batch * p.heads_kv * n_chunks * n_qb * n_kb;
}

const Impl kImpls[] = {
    {"ref_f32", ref::attention_forward<float>, ref::attention_backward<float>,
     ref::attention_merge<float>, ref_tiles, 1},
    {"cpu_1thread", cpu::attention_forward, cpu::attention_backward, cpu::attention_merge,
     cpu_tiles, 1},
    {"cpu_2threads", cpu::attention_forward, cpu::attention_backward, cpu::attention_merge,
     cpu_tiles, 2},
};

// Sets the OpenMP thread count for a scope.
class ScopedThreads {
 public:
  explicit ScopedThreads(int threads) : saved_(omp_get_max_threads()) {
    omp_set_num_threads(threads);
  }
  ~ScopedThreads() { omp_set_num_threads(saved_); }

 private:
  int saved_;
};

// Forward, then backward from the forward's own out/lse, into zeroed gradients.
Results<float> run_impl(const Impl& impl, const Inputs<float>& in, const AttentionParams& p) {
  ScopedThreads threads(impl.threads);
  Results<float> r;
  r.out.assign(in.q.size(), std::nanf(""));  // every element must be written
  r.lse.assign(static_cast<size_t>(p.batch * p.heads_q * p.seq_q), std::nanf(""));
  r.dq.assign(in.q.size(), 0.0f);
  r.dk.assign(in.k.size(), 0.0f);
  r.dv.assign(in.v.size(), 0.0f);
  impl.forward(r.out.data(), r.lse.data(), in.q.data(), in.k.data(), in.v.data(), in.q_pos.data(),
               in.q_seg.data(), in.k_pos.data(), in.k_seg.data(), p, &r.forward_stats);
  impl.backward(r.dq.data(), r.dk.data(), r.dv.data(), in.d_out.data(), r.out.data(), r.lse.data(),
                in.q.data(), in.k.data(), in.v.data(), in.q_pos.data(), in.q_seg.data(),
                in.k_pos.data(), in.k_seg.data(), p, &r.backward_stats);
  return r;
}

template <typename T>
Results<T> run_ref(const Inputs<T>& in, const AttentionParams& p) {
  Results<T> r;
  r.out.assign(in.q.size(), T(0));
  r.lse.assign(static_cast<size_t>(p.batch * p.heads_q * p.seq_q), T(0));
  r.dq.assign(in.q.size(), T(0));
  r.dk.assign(in.k.size(), T(0));
  r.dv.assign(in.v.size(), T(0));
  ref::attention_forward<T>(r.out.data(), r.lse.data(), in.q.data(), in.k.data(), in.v.data(),
                            in.q_pos.data(), in.q_seg.data(), in.k_pos.data(), in.k_seg.data(), p,
                            &r.forward_stats);
  ref::attention_backward<T>(r.dq.data(), r.dk.data(), r.dv.data(), in.d_out.data(), r.out.data(),
                             r.lse.data(), in.q.data(), in.k.data(), in.v.data(), in.q_pos.data(),
                             in.q_seg.data(), in.k_pos.data(), in.k_seg.data(), p,
                             &r.backward_stats);
  return r;
}

// The oracle per case, computed once.
const Results<double>& oracle(const Case& c) {
  static std::map<std::string, Results<double>> cache;
  auto it = cache.find(c.name);
  if (it == cache.end()) {
    it = cache.emplace(c.name, run_ref(make_inputs<double>(c), params_of(c))).first;
  }
  return it->second;
}

// ---------------------------------------------------------------- metrics

template <typename A, typename E>
::testing::AssertionResult close_elementwise(const std::vector<A>& actual,
                                             const std::vector<E>& expected, double tol) {
  if (actual.size() != expected.size()) return ::testing::AssertionFailure() << "size differs";
  double sum_sq = 0;
  int64_t finite = 0;
  for (const E e : expected) {
    if (std::isfinite(static_cast<double>(e))) {
      sum_sq += static_cast<double>(e) * e;
      ++finite;
    }
  }
  const double rms = finite > 0 ? std::sqrt(sum_sq / static_cast<double>(finite)) : 0.0;
  double worst = 0;
  size_t worst_at = 0;
  for (size_t i = 0; i < actual.size(); ++i) {
    const double a = actual[i], e = expected[i];
    if (std::isinf(e)) {
      if (a != e)
        return ::testing::AssertionFailure()
               << "element " << i << " is " << a << ", expected " << e;
      continue;
    }
    if (!std::isfinite(a)) return ::testing::AssertionFailure() << "element " << i << " is " << a;
    const double err = std::abs(a - e) / (std::abs(e) + rms + 1e-300);
    if (err > worst) worst = err, worst_at = i;
  }
  if (worst > tol) {
    return ::testing::AssertionFailure()
           << "worst relative error " << worst << " > " << tol << " at " << worst_at << ": "
           << actual[worst_at] << " vs " << expected[worst_at];
  }
  return ::testing::AssertionSuccess();
}

template <typename A, typename E>
::testing::AssertionResult close_in_norm(const std::vector<A>& actual,
                                         const std::vector<E>& expected, double tol,
                                         double expected_scale = 1.0) {
  if (actual.size() != expected.size()) return ::testing::AssertionFailure() << "size differs";
  double diff = 0, norm = 0;
  for (size_t i = 0; i < actual.size(); ++i) {
    const double e = expected_scale * static_cast<double>(expected[i]);
    if (!std::isfinite(static_cast<double>(actual[i]))) {
      return ::testing::AssertionFailure() << "element " << i << " is " << actual[i];
    }
    diff += (actual[i] - e) * (actual[i] - e);
    norm += e * e;
  }
  const double rel = std::sqrt(diff) / std::max(std::sqrt(norm), 1e-300);
  if (rel > tol) {
    return ::testing::AssertionFailure() << "relative error in norm " << rel << " > " << tol;
  }
  return ::testing::AssertionSuccess();
}

void expect_stats(const AttentionStats& s, Skips skips, int64_t total, const char* what) {
  SCOPED_TRACE(what);
  EXPECT_EQ(s.blocks_computed + s.blocks_skipped, total);
  const double skipped = static_cast<double>(s.blocks_skipped) / static_cast<double>(total);
  switch (skips) {
    case Skips::kAny:
      break;
    case Skips::kNone:
      EXPECT_EQ(s.blocks_skipped, 0);
      break;
    case Skips::kSome:
      EXPECT_GT(s.blocks_skipped, 0);
      break;
    case Skips::kAboutHalf:
      EXPECT_GE(skipped, 0.3);
      EXPECT_LE(skipped, 0.55);
      break;
  }
}

// ---------------------------------------------------------------- the table × implementations

class AttentionCaseTest : public ::testing::TestWithParam<std::tuple<Case, Impl>> {
 protected:
  const Case& test_case() const { return std::get<0>(GetParam()); }
  const Impl& impl() const { return std::get<1>(GetParam()); }
};

TEST_P(AttentionCaseTest, ForwardAndBackwardMatchOracle) {
  const AttentionParams p = params_of(test_case());
  const Inputs<float> in = make_inputs<float>(test_case());
  const Results<double>& want = oracle(test_case());
  const Results<float> got = run_impl(impl(), in, p);
  EXPECT_TRUE(close_elementwise(got.out, want.out, kTolerance)) << "out";
  EXPECT_TRUE(close_elementwise(got.lse, want.lse, kTolerance)) << "lse";
  EXPECT_TRUE(close_in_norm(got.dq, want.dq, kTolerance)) << "dq";
  EXPECT_TRUE(close_in_norm(got.dk, want.dk, kTolerance)) << "dk";
  EXPECT_TRUE(close_in_norm(got.dv, want.dv, kTolerance)) << "dv";
  // Rows that see no key: exactly zero output (lse -inf is checked above).
  for (size_t l = 0; l < want.lse.size(); ++l) {
    if (want.lse[l] != kNegInf) continue;
    const int64_t i = static_cast<int64_t>(l) % p.seq_q;
    const int64_t h = (static_cast<int64_t>(l) / p.seq_q) % p.heads_q;
    const int64_t b = static_cast<int64_t>(l) / (p.seq_q * p.heads_q);
    for (int64_t d = 0; d < p.head_dim; ++d) {
      ASSERT_EQ(got.out[static_cast<size_t>(((b * p.seq_q + i) * p.heads_q + h) * p.head_dim + d)],
                0.0f);
    }
  }
  const int64_t total = impl().total_tiles(p);
  expect_stats(got.forward_stats, test_case().skips, total, "forward stats");
  expect_stats(got.backward_stats, test_case().skips, total, "backward stats");
  EXPECT_EQ(got.forward_stats.blocks_skipped, got.backward_stats.blocks_skipped);
}

TEST_P(AttentionCaseTest, BackwardAccumulates) {
  const AttentionParams p = params_of(test_case());
  const Inputs<float> in = make_inputs<float>(test_case());
  Results<float> r = run_impl(impl(), in, p);
  const Results<double>& want = oracle(test_case());
  ScopedThreads threads(impl().threads);
  impl().backward(r.dq.data(), r.dk.data(), r.dv.data(), in.d_out.data(), r.out.data(),
                  r.lse.data(), in.q.data(), in.k.data(), in.v.data(), in.q_pos.data(),
                  in.q_seg.data(), in.k_pos.data(), in.k_seg.data(), p, nullptr);
  EXPECT_TRUE(close_in_norm(r.dq, want.dq, kTolerance, 2.0)) << "dq after two calls";
  EXPECT_TRUE(close_in_norm(r.dk, want.dk, kTolerance, 2.0)) << "dk after two calls";
  EXPECT_TRUE(close_in_norm(r.dv, want.dv, kTolerance, 2.0)) << "dv after two calls";
}

// Keys cut in two chunks at a point that is not a block boundary, as ring attention sees them.
TEST_P(AttentionCaseTest, KeyChunksMergeToFullAttention) {
  const AttentionParams p = params_of(test_case());
  const Inputs<float> in = make_inputs<float>(test_case());
  const Results<float> full = run_impl(impl(), in, p);
  const int64_t split = std::max<int64_t>(1, p.seq_k * 2 / 5);
  ASSERT_LT(split, p.seq_k);
  const int64_t kv_width = p.heads_kv * p.head_dim;
  ScopedThreads threads(impl().threads);

  std::vector<float> dq(in.q.size(), 0.0f), dk(in.k.size(), 0.0f), dv(in.v.size(), 0.0f);
  std::vector<float> out_a, lse_a;  // the running merged result
  const int64_t bounds[] = {0, split, p.seq_k};
  for (int chunk = 0; chunk < 2; ++chunk) {
    const int64_t begin = bounds[chunk], end = bounds[chunk + 1];
    AttentionParams pc = p;
    pc.seq_k = end - begin;
    const auto k = key_rows(in.k, p.batch, p.seq_k, kv_width, begin, end);
    const auto v = key_rows(in.v, p.batch, p.seq_k, kv_width, begin, end);
    const auto k_pos = key_rows(in.k_pos, p.batch, p.seq_k, 1, begin, end);
    const auto k_seg = key_rows(in.k_seg, p.batch, p.seq_k, 1, begin, end);
    std::vector<float> out(in.q.size()), lse(full.lse.size());
    impl().forward(out.data(), lse.data(), in.q.data(), k.data(), v.data(), in.q_pos.data(),
                   in.q_seg.data(), k_pos.data(), k_seg.data(), pc, nullptr);
    if (chunk == 0) {
      out_a = out;
      lse_a = lse;
    } else {  // in place: the merged result overwrites side a
      impl().merge(out_a.data(), lse_a.data(), out_a.data(), lse_a.data(), out.data(), lse.data(),
                   p.batch, p.seq_q, p.heads_q, p.head_dim);
    }
    // Backward of this chunk from the GLOBAL out/lse; dq sums over chunks.
    std::vector<float> dk_c(k.size(), 0.0f), dv_c(v.size(), 0.0f);
    impl().backward(dq.data(), dk_c.data(), dv_c.data(), in.d_out.data(), full.out.data(),
                    full.lse.data(), in.q.data(), k.data(), v.data(), in.q_pos.data(),
                    in.q_seg.data(), k_pos.data(), k_seg.data(), pc, nullptr);
    put_key_rows(dk, dk_c, p.batch, p.seq_k, kv_width, begin, end);
    put_key_rows(dv, dv_c, p.batch, p.seq_k, kv_width, begin, end);
  }
  EXPECT_TRUE(close_elementwise(out_a, full.out, kTolerance)) << "merged out";
  EXPECT_TRUE(close_elementwise(lse_a, full.lse, kTolerance)) << "merged lse";
  EXPECT_TRUE(close_in_norm(dq, full.dq, kTolerance)) << "dq summed over chunks";
  EXPECT_TRUE(close_in_norm(dk, full.dk, kTolerance)) << "dk of the chunks";
  EXPECT_TRUE(close_in_norm(dv, full.dv, kTolerance)) << "dv of the chunks";
}

INSTANTIATE_TEST_SUITE_P(Table, AttentionCaseTest,
                         ::testing::Combine(::testing::ValuesIn(kCases),
                                            ::testing::ValuesIn(kImpls)),
                         [](const ::testing::TestParamInfo<AttentionCaseTest::ParamType>& param) {
                           return std::string(std::get<0>(param.param).name) + "_" +
                                  std::get<1>(param.param).name;
                         });

// ---------------------------------------------------------------- the oracle itself

class AttentionOracleTest : public ::testing::TestWithParam<Case> {};

// Loss L = Σ out · d_out; dL/dx by central differences in f64, for every input element.
TEST_P(AttentionOracleTest, BackwardMatchesFiniteDifferences) {
  const Case& c = GetParam();
  const AttentionParams p = params_of(c);
  Inputs<double> in = make_inputs<double>(c);
  const Results<double>& want = oracle(c);
  std::vector<double> out(in.q.size()), lse(want.lse.size());
  auto loss = [&]() {
    ref::attention_forward<double>(out.data(), lse.data(), in.q.data(), in.k.data(), in.v.data(),
                                   in.q_pos.data(), in.q_seg.data(), in.k_pos.data(),
                                   in.k_seg.data(), p);
    double sum = 0;
    for (size_t i = 0; i < out.size(); ++i) sum += out[i] * in.d_out[i];
    return sum;
  };
  constexpr double kStep = 1e-6;
  auto numeric_grad = [&](std::vector<double>& x) {
    std::vector<double> grad(x.size());
    for (size_t i = 0; i < x.size(); ++i) {
      const double saved = x[i];
      x[i] = saved + kStep;
      const double up = loss();
      x[i] = saved - kStep;
      const double down = loss();
      x[i] = saved;
      grad[i] = (up - down) / (2 * kStep);
    }
    return grad;
  };
  EXPECT_TRUE(close_in_norm(numeric_grad(in.q), want.dq, 1e-7)) << "dq";
  EXPECT_TRUE(close_in_norm(numeric_grad(in.k), want.dk, 1e-7)) << "dk";
  EXPECT_TRUE(close_in_norm(numeric_grad(in.v), want.dv, 1e-7)) << "dv";
}

// The whole score matrix of each (batch, head), masked with -inf, softmaxed row by row.
TEST_P(AttentionOracleTest, ForwardMatchesDenseSoftmax) {
  const Case& c = GetParam();
  const AttentionParams p = params_of(c);
  const Inputs<double> in = make_inputs<double>(c);
  const Results<double>& want = oracle(c);
  const int64_t Sq = p.seq_q, Sk = p.seq_k, Hq = p.heads_q, Hkv = p.heads_kv, D = p.head_dim;
  const double scale = 1.0 / std::sqrt(static_cast<double>(D));
  std::vector<double> out(in.q.size(), 0.0), lse(want.lse.size());
  for (int64_t b = 0; b < p.batch; ++b) {
    for (int64_t h = 0; h < Hq; ++h) {
      const int64_t hk = h * Hkv / Hq;
      std::vector<double> scores(static_cast<size_t>(Sq * Sk));
      for (int64_t i = 0; i < Sq; ++i) {
        for (int64_t j = 0; j < Sk; ++j) {
          double s = 0;
          for (int64_t d = 0; d < D; ++d) {
            s += in.q[((b * Sq + i) * Hq + h) * D + d] * in.k[((b * Sk + j) * Hkv + hk) * D + d];
          }
          const int32_t qp = in.q_pos[b * Sq + i], kp = in.k_pos[b * Sk + j];
          const bool seen = in.q_seg[b * Sq + i] == in.k_seg[b * Sk + j] && kp <= qp &&
                            (c.window == 0 || qp - kp < c.window);
          scores[i * Sk + j] = seen ? s * scale : kNegInf;
        }
      }
      for (int64_t i = 0; i < Sq; ++i) {
        const double* row = &scores[i * Sk];
        const double m = *std::max_element(row, row + Sk);
        double sum = 0;
        for (int64_t j = 0; j < Sk; ++j) sum += m == kNegInf ? 0.0 : std::exp(row[j] - m);
        lse[(b * Hq + h) * Sq + i] = m == kNegInf ? kNegInf : m + std::log(sum);
        for (int64_t j = 0; j < Sk && m != kNegInf; ++j) {
          const double prob = std::exp(row[j] - m) / sum;
          for (int64_t d = 0; d < D; ++d) {
            out[((b * Sq + i) * Hq + h) * D + d] += prob * in.v[((b * Sk + j) * Hkv + hk) * D + d];
          }
        }
      }
    }
  }
  EXPECT_TRUE(close_elementwise(want.out, out, 1e-12)) << "out";
  EXPECT_TRUE(close_elementwise(want.lse, lse, 1e-12)) << "lse";
}

// The small cases of the table (finite differences cost two forwards per input element).
std::vector<Case> small_cases() {
  std::vector<Case> small;
  for (const Case& c : kCases) {
    const int64_t elements =
        c.batch * (c.seq_q * c.heads_q + 2 * c.seq_k * c.heads_kv) * c.head_dim;
    if (elements <= 2000) small.push_back(c);
  }
  return small;
}

INSTANTIATE_TEST_SUITE_P(Small, AttentionOracleTest, ::testing::ValuesIn(small_cases()),
                         [](const ::testing::TestParamInfo<Case>& param) {
                           return std::string(param.param.name);
                         });

// ---------------------------------------------------------------- merge and determinism

TEST(AttentionMerge, EmptySidesAreIgnored) {
  const float inf = std::numeric_limits<float>::infinity();
  // One row, D = 2: (a empty, b seen), (both empty), (a seen with garbage in an empty b).
  for (const Impl& impl : kImpls) {
    SCOPED_TRACE(impl.name);
    const std::vector<float> out_a{0, 0, 0, 0, 1, 2}, lse_a{-inf, -inf, 0.5f};
    const std::vector<float> out_b{3, 4, 0, 0, NAN, NAN}, lse_b{1.5f, -inf, -inf};
    std::vector<float> out(6), lse(3);
    impl.merge(out.data(), lse.data(), out_a.data(), lse_a.data(), out_b.data(), lse_b.data(), 1, 3,
               1, 2);
    EXPECT_EQ(out, (std::vector<float>{3, 4, 0, 0, 1, 2}));
    EXPECT_EQ(lse, (std::vector<float>{1.5f, -inf, 0.5f}));
  }
}

// An empty key chunk: every row sees nothing (out 0, lse -inf) and the gradients stay as they were.
TEST(AttentionEmpty, NoKeys) {
  AttentionParams p;
  p.batch = 2;
  p.seq_q = 5;
  p.seq_k = 0;
  p.heads_q = 4;
  p.heads_kv = 2;
  p.head_dim = 16;
  const std::vector<float> q = normal(2 * 5 * 4 * 16, 1, "q"),
                           d_out = normal(2 * 5 * 4 * 16, 1, "g");
  const std::vector<int32_t> q_pos(10, 3), q_seg(10, 0);
  const float no_key = -std::numeric_limits<float>::infinity();
  for (const Impl& impl : kImpls) {
    SCOPED_TRACE(impl.name);
    std::vector<float> out(q.size(), 7.0f), lse(2 * 4 * 5, 7.0f), dq(q.size(), 1.0f);
    impl.forward(out.data(), lse.data(), q.data(), nullptr, nullptr, q_pos.data(), q_seg.data(),
                 nullptr, nullptr, p, nullptr);
    EXPECT_EQ(out, std::vector<float>(q.size(), 0.0f));
    EXPECT_EQ(lse, std::vector<float>(lse.size(), no_key));
    impl.backward(dq.data(), nullptr, nullptr, d_out.data(), out.data(), lse.data(), q.data(),
                  nullptr, nullptr, q_pos.data(), q_seg.data(), nullptr, nullptr, p, nullptr);
    EXPECT_EQ(dq, std::vector<float>(q.size(), 1.0f));
  }
}

// Two threads, twice: bit-identical (forward and backward of a split and a non-split case).
TEST(AttentionCpu, DeterministicForAThreadCount) {
  for (const char* name : {"mqa_causal_d128", "gqa_packed_d64"}) {
    SCOPED_TRACE(name);
    const Case& c = *std::find_if(std::begin(kCases), std::end(kCases),
                                  [&](const Case& x) { return std::string(x.name) == name; });
    const Inputs<float> in = make_inputs<float>(c);
    const Results<float> first = run_impl(kImpls[2], in, params_of(c));
    const Results<float> second = run_impl(kImpls[2], in, params_of(c));
    EXPECT_EQ(first.out, second.out);
    EXPECT_EQ(first.lse, second.lse);
    EXPECT_EQ(first.dq, second.dq);
    EXPECT_EQ(first.dk, second.dk);
    EXPECT_EQ(first.dv, second.dv);
  }
}

}  // namespace
}  // namespace maxctx::kernels

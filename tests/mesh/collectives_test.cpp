// Communicator verbs on the MPI backend (1, 2, 4 and 8 ranks) against results computed without
// MPI: every element type, sizes that do not divide the rank count (fewer elements than ranks
// too), both reduce-scatter algorithms, the chunked paths (per-call element limits of 3 and 1),
// and the tensor-view forms. The element limit is the MPI backend's knob, hence its header here.
#include <gtest/gtest.h>

#include <algorithm>
#include <climits>
#include <cstdint>
#include <numeric>
#include <string>
#include <vector>

#include "maxctx/core/check.h"
#include "maxctx/core/tensor.h"
#include "maxctx/mesh/communicator.h"
#include "maxctx/mesh/mpi/mpi_communicator.h"

namespace maxctx {
namespace {

// Lowers the per-call element limit for one scope.
class ElementLimit {
 public:
  explicit ElementLimit(int64_t limit) : saved_(max_elements_per_call()) {
    set_max_elements_per_call(limit);
  }
  ~ElementLimit() { set_max_elements_per_call(saved_); }

 private:
  int64_t saved_;
};

// One MPI call per verb; chunks of 3 elements; one element per call.
const std::vector<int64_t> kLimits = {INT_MAX, 3, 1};
const std::vector<ReduceScatterAlgorithm> kAlgorithms = {ReduceScatterAlgorithm::kRing,
                                                         ReduceScatterAlgorithm::kMpi};

// Rank r's element i in the typed tests: sums over 8 ranks stay below 81, exact in every type.
template <typename T>
T small(int rank, int64_t i) {
  return static_cast<T>((3 * rank + i) % 11);
}

// Sizes that do not divide the rank count, including fewer elements than ranks.
std::vector<int64_t> uneven_totals(int ranks) {
  return {0, 1, ranks - 1, ranks, ranks + 1, 3 * ranks + 2};
}

TEST(SplitTest, CountsAndOffsetsFollowTheFirstBlocksTakeTheRemainder) {
  EXPECT_EQ(split_counts(10, 4), (std::vector<int64_t>{3, 3, 2, 2}));
  // Element by element: g++ 12.2 with AVX-512 miscompiles the literal vector<int64_t>{1, 1, 0, 0}
  // (a vpbroadcastq of the first element, giving {1, 1, 1, 1}).
  const std::vector<int64_t> fewer = split_counts(2, 4);
  ASSERT_EQ(fewer.size(), 4u);
  EXPECT_EQ(fewer[0], 1);
  EXPECT_EQ(fewer[1], 1);
  EXPECT_EQ(fewer[2], 0);
  EXPECT_EQ(fewer[3], 0);
  EXPECT_EQ(split_counts(0, 3), (std::vector<int64_t>{0, 0, 0}));
  EXPECT_EQ(split_counts(12, 1), (std::vector<int64_t>{12}));
  const std::vector<int64_t> offsets = {0, 3, 6, 8, 10};
  for (int p = 0; p <= 4; ++p) EXPECT_EQ(split_offset(10, 4, p), offsets[p]) << p;
  EXPECT_EQ(split_offset(2, 4, 3), 2);
  EXPECT_EQ(split_count(int64_t{5} << 31, 3, 0), ((int64_t{5} << 31) + 2) / 3);
}

template <typename T>
class TypedCollectivesTest : public testing::Test {
 protected:
  const Communicator world_ = Communicator::world();
  const int n_ = world_.size();
  const int r_ = world_.rank();
};

using ElementTypes = testing::Types<float, double, int32_t, int64_t, uint16_t, int8_t, uint8_t>;
TYPED_TEST_SUITE(TypedCollectivesTest, ElementTypes);

TYPED_TEST(TypedCollectivesTest, AllGatherIsEveryPartInRankOrder) {
  using T = TypeParam;
  for (const int64_t limit : kLimits) {
    const ElementLimit scope(limit);
    for (const int64_t m : {0, 1, 7}) {
      std::vector<T> mine(m);
      for (int64_t i = 0; i < m; ++i) mine[i] = small<T>(this->r_, i);
      std::vector<T> out(m * this->n_, T{99});
      this->world_.template all_gather<T>(mine, out);
      for (int p = 0; p < this->n_; ++p) {
        for (int64_t i = 0; i < m; ++i) {
          ASSERT_EQ(out[p * m + i], small<T>(p, i)) << "limit " << limit << " m " << m;
        }
      }
    }
  }
}

TYPED_TEST(TypedCollectivesTest, AllGatherUnevenFollowsSplitCounts) {
  using T = TypeParam;
  for (const int64_t limit : kLimits) {
    const ElementLimit scope(limit);
    for (const int64_t total : uneven_totals(this->n_)) {
      const int64_t offset = split_offset(total, this->n_, this->r_);
      std::vector<T> mine(split_count(total, this->n_, this->r_));
      for (size_t i = 0; i < mine.size(); ++i) mine[i] = small<T>(this->r_, offset + i);
      std::vector<T> out(total, T{99});
      this->world_.template all_gather_uneven<T>(mine, out);
      for (int p = 0; p < this->n_; ++p) {
        for (int64_t g = split_offset(total, this->n_, p); g < split_offset(total, this->n_, p + 1);
             ++g) {
          ASSERT_EQ(out[g], small<T>(p, g)) << "limit " << limit << " total " << total;
        }
      }
    }
  }
}

TYPED_TEST(TypedCollectivesTest, ReduceScatterSumsMyBlockWithBothAlgorithms) {
  using T = TypeParam;
  for (const ReduceScatterAlgorithm algorithm : kAlgorithms) {
    for (const int64_t limit : kLimits) {
      const ElementLimit scope(limit);
      for (const int64_t total : uneven_totals(this->n_)) {
        std::vector<T> in(total);
        for (int64_t i = 0; i < total; ++i) in[i] = small<T>(this->r_, i);
        const int64_t offset = split_offset(total, this->n_, this->r_);
        std::vector<T> out(split_count(total, this->n_, this->r_), T{99});
        this->world_.template reduce_scatter<T>(in, out, algorithm);
        for (size_t j = 0; j < out.size(); ++j) {
          int64_t sum = 0;
          for (int p = 0; p < this->n_; ++p) sum += small<int64_t>(p, offset + j);
          ASSERT_EQ(out[j], static_cast<T>(sum))
              << algorithm_name(algorithm) << " limit " << limit << " total " << total;
        }
      }
    }
  }
}

TYPED_TEST(TypedCollectivesTest, AllReduceSumMaxMin) {
  using T = TypeParam;
  for (const int64_t limit : kLimits) {
    const ElementLimit scope(limit);
    const int64_t m = 8;
    for (const ReduceOp op : {ReduceOp::kSum, ReduceOp::kMax, ReduceOp::kMin}) {
      std::vector<T> data(m);
      for (int64_t i = 0; i < m; ++i) data[i] = small<T>(this->r_, i);
      this->world_.template all_reduce<T>(data, op);
      for (int64_t i = 0; i < m; ++i) {
        int64_t want = small<int64_t>(0, i);
        for (int p = 1; p < this->n_; ++p) {
          const int64_t v = small<int64_t>(p, i);
          want = op == ReduceOp::kSum
                     ? want + v
                     : (op == ReduceOp::kMax ? std::max(want, v) : std::min(want, v));
        }
        ASSERT_EQ(data[i], static_cast<T>(want)) << "op " << static_cast<int>(op);
      }
    }
  }
}

TYPED_TEST(TypedCollectivesTest, BroadcastCopiesTheRoot) {
  using T = TypeParam;
  for (const int64_t limit : kLimits) {
    const ElementLimit scope(limit);
    for (const int root : {0, this->n_ - 1}) {
      std::vector<T> data(7, T{99});
      if (this->r_ == root) {
        for (int64_t i = 0; i < 7; ++i) data[i] = small<T>(root, i);
      }
      this->world_.template broadcast<T>(data, root);
      for (int64_t i = 0; i < 7; ++i) ASSERT_EQ(data[i], small<T>(root, i));
    }
  }
}

// Rank r sends r + 3 elements to the right and receives left + 3 from the left.
TYPED_TEST(TypedCollectivesTest, RingSendRecvWithUnequalSizes) {
  using T = TypeParam;
  const int n = this->n_, r = this->r_;
  const int right = (r + 1) % n, left = (r + n - 1) % n;
  for (const int64_t limit : kLimits) {
    const ElementLimit scope(limit);
    std::vector<T> send(r + 3);
    for (size_t i = 0; i < send.size(); ++i) send[i] = small<T>(r, i);
    std::vector<T> recv(left + 3, T{99});
    this->world_.template send_recv<T>(send, right, recv, left, 5);
    for (size_t i = 0; i < recv.size(); ++i) ASSERT_EQ(recv[i], small<T>(left, i));
  }
}

// Rank r's block for rank p holds m elements small(r, p * m + i); rank p receives it as block r.
TYPED_TEST(TypedCollectivesTest, AllToAllSendsBlockPToRankP) {
  using T = TypeParam;
  const int n = this->n_, r = this->r_;
  for (const int64_t limit : kLimits) {
    const ElementLimit scope(limit);
    for (const int64_t m : {0, 1, 7}) {
      std::vector<T> in(m * n);
      for (int64_t i = 0; i < m * n; ++i) in[i] = small<T>(r, i);
      std::vector<T> out(m * n, T{99});
      this->world_.template all_to_all<T>(in, out);
      for (int p = 0; p < n; ++p) {
        for (int64_t i = 0; i < m; ++i) {
          ASSERT_EQ(out[p * m + i], small<T>(p, r * m + i)) << "limit " << limit << " m " << m;
        }
      }
    }
  }
}

// Rank r sends rank p count(r, p) = (r + 2p) % 3 · m elements small(r, 1000 p + i) (some
// blocks empty, the sizes differing per pair); rank p receives them as block r, in rank order.
TYPED_TEST(TypedCollectivesTest, AllToAllvSendsUnevenBlocks) {
  using T = TypeParam;
  const int n = this->n_, r = this->r_;
  const auto count = [](int from, int to, int64_t m) { return (from + 2 * to) % 3 * m; };
  for (const int64_t limit : kLimits) {
    const ElementLimit scope(limit);
    for (const int64_t m : {1, 7}) {
      std::vector<int64_t> send_counts(n), recv_counts(n);
      std::vector<T> in;
      for (int p = 0; p < n; ++p) {
        send_counts[p] = count(r, p, m);
        recv_counts[p] = count(p, r, m);
        for (int64_t i = 0; i < send_counts[p]; ++i) in.push_back(small<T>(r, 1000 * p + i));
      }
      int64_t received = 0;
      for (int64_t c : recv_counts) received += c;
      std::vector<T> out(received, T{99});
      this->world_.template all_to_allv<T>(in, send_counts, out, recv_counts);
      int64_t at = 0;
      for (int p = 0; p < n; ++p) {
        for (int64_t i = 0; i < recv_counts[p]; ++i, ++at) {
          ASSERT_EQ(out[at], small<T>(p, 1000 * r + i)) << "limit " << limit << " m " << m;
        }
      }
    }
  }
}

class CollectivesTest : public testing::Test {
 protected:
  const Communicator world_ = Communicator::world();
  const int n_ = world_.size();
  const int r_ = world_.rank();
};

// Closed forms with rank r contributing r * 1000 + i (all sums exact in float).
TEST_F(CollectivesTest, ReduceScatterOverManyRingSegments) {
  // 256 KiB ring segments hold 65536 floats: blocks of 2.5 segments, plus a remainder.
  const int64_t total = n_ * (65536 * 5 / 2) + n_ / 2 + 1;
  std::vector<float> in(total);
  for (int64_t i = 0; i < total; ++i) in[i] = static_cast<float>(r_ * 1000 + i);
  const int64_t offset = split_offset(total, n_, r_);
  for (const ReduceScatterAlgorithm algorithm : kAlgorithms) {
    std::vector<float> out(split_count(total, n_, r_), -1.0f);
    world_.reduce_scatter<float>(in, out, algorithm);
    int64_t wrong = 0;
    for (size_t j = 0; j < out.size(); ++j) {
      const double want = 1000.0 * n_ * (n_ - 1) / 2 + static_cast<double>(n_) * (offset + j);
      wrong += out[j] != static_cast<float>(want);
    }
    EXPECT_EQ(wrong, 0) << algorithm_name(algorithm);
  }
}

TEST_F(CollectivesTest, DefaultReduceScatterAlgorithmIsSettable) {
  const ReduceScatterAlgorithm saved = default_reduce_scatter_algorithm();
  for (const ReduceScatterAlgorithm algorithm : kAlgorithms) {
    set_default_reduce_scatter_algorithm(algorithm);
    EXPECT_EQ(default_reduce_scatter_algorithm(), algorithm);
    std::vector<double> in(2 * n_ + 1);
    std::iota(in.begin(), in.end(), r_ * 1000.0);
    std::vector<double> out(split_count(in.size(), n_, r_));
    world_.reduce_scatter<double>(in, out);
    const int64_t offset = split_offset(in.size(), n_, r_);
    for (size_t j = 0; j < out.size(); ++j) {
      EXPECT_EQ(out[j], 1000.0 * n_ * (n_ - 1) / 2 + static_cast<double>(n_) * (offset + j));
    }
  }
  set_default_reduce_scatter_algorithm(saved);
}

TEST_F(CollectivesTest, AllGathersInPlace) {
  for (const int64_t limit : kLimits) {
    const ElementLimit scope(limit);
    const int64_t m = 5;
    std::vector<float> out(m * n_, -1.0f);
    for (int64_t i = 0; i < m; ++i) out[r_ * m + i] = static_cast<float>(r_ * 1000 + i);
    world_.all_gather<float>(std::span<const float>(out).subspan(r_ * m, m), out);
    for (int64_t g = 0; g < m * n_; ++g) {
      ASSERT_EQ(out[g], static_cast<float>((g / m) * 1000 + g % m)) << "limit " << limit;
    }
    const int64_t total = 2 * n_ + 1;
    const int64_t offset = split_offset(total, n_, r_);
    const int64_t count = split_count(total, n_, r_);
    std::vector<int64_t> uneven(total, -1);
    for (int64_t i = 0; i < count; ++i) uneven[offset + i] = r_ * 1000 + offset + i;
    world_.all_gather_uneven<int64_t>(std::span<const int64_t>(uneven).subspan(offset, count),
                                      uneven);
    for (int p = 0; p < n_; ++p) {
      for (int64_t g = split_offset(total, n_, p); g < split_offset(total, n_, p + 1); ++g) {
        ASSERT_EQ(uneven[g], p * 1000 + g);
      }
    }
  }
}

TEST_F(CollectivesTest, IsendIrecvMatchByTagAndWaitAll) {
  const int right = (r_ + 1) % n_, left = (r_ + n_ - 1) % n_;
  for (const int64_t limit : kLimits) {
    const ElementLimit scope(limit);
    std::vector<int32_t> first(4), second(6);
    for (int i = 0; i < 4; ++i) first[i] = r_ * 1000 + i;
    for (int i = 0; i < 6; ++i) second[i] = r_ * 1000 + 100 + i;
    std::vector<int32_t> got_first(4, -1), got_second(6, -1);
    // Receives posted in the other order than the sends: tags, not order, pair them.
    std::vector<Request> requests;
    requests.push_back(world_.irecv<int32_t>(got_second, left, 2));
    requests.push_back(world_.irecv<int32_t>(got_first, left, 1));
    Request send_first = world_.isend<int32_t>(first, right, 1);
    Request send_second = world_.isend<int32_t>(second, right, 2);
    EXPECT_TRUE(send_first.pending());
    wait_all(requests);
    send_first.wait();
    EXPECT_FALSE(send_first.pending());
    Request moved = std::move(send_second);
    EXPECT_FALSE(send_second.pending());  // NOLINT(bugprone-use-after-move): moved-from is empty
    moved.wait();
    for (int i = 0; i < 4; ++i) ASSERT_EQ(got_first[i], left * 1000 + i);
    for (int i = 0; i < 6; ++i) ASSERT_EQ(got_second[i], left * 1000 + 100 + i);
  }
}

// A check failure, turned into an exception for the test; the message carries the values.
template <typename F>
std::string check_message(F&& f) {
  std::string message;
  set_check_handler([](const std::string& m) { throw Error(m); });
  try {
    f();
  } catch (const Error& e) {
    message = e.what();
  }
  set_check_handler({});
  return message;
}

TEST_F(CollectivesTest, SizeMismatchesAreCheckFailuresWithTheValues) {
  std::vector<float> mine(3), out(3 * n_ + 1), in(10);
  const std::string gather = check_message([&] { world_.all_gather<float>(mine, out); });
  EXPECT_NE(gather.find(fmt::format("({} vs {})", 3 * n_ + 1, 3 * n_)), std::string::npos)
      << gather;
  std::vector<float> block(split_count(10, n_, r_) + 1);
  const std::string scatter = check_message([&] { world_.reduce_scatter<float>(in, block); });
  EXPECT_NE(scatter.find(fmt::format("({} vs {})", block.size(), block.size() - 1)),
            std::string::npos)
      << scatter;
  std::vector<float> wrong_part(split_count(10, n_, r_) + 2), ten(10);
  const std::string uneven =
      check_message([&] { world_.all_gather_uneven<float>(wrong_part, ten); });
  EXPECT_NE(uneven.find("all_gather_uneven"), std::string::npos) << uneven;
  const std::string tag =
      check_message([&] { world_.send_recv<float>(mine, kNoPeer, mine, kNoPeer, -1); });
  EXPECT_NE(tag.find("tag -1"), std::string::npos) << tag;
  const std::string overlap = check_message([&] {
    world_.reduce_scatter<float>(in, std::span<float>(in).first(split_count(10, n_, r_)));
  });
  EXPECT_NE(overlap.find("overlaps"), std::string::npos) << overlap;
  world_.barrier();  // every rank failed before any MPI call, so the world is still in step
}

// The view forms move the same elements as the span forms; bf16 and int8 travel as their bits.
TEST_F(CollectivesTest, TensorViewsGatherScatterReduceAndExchange) {
  const int64_t m = 5;
  Tensor mine(Shape{1, m});
  for (int64_t i = 0; i < m; ++i) mine.data<float>()[i] = static_cast<float>(r_ * 1000 + i);
  Tensor gathered(Shape{n_, m});
  world_.all_gather(mine.view(), gathered.view(), Stream());
  for (int64_t g = 0; g < n_ * m; ++g) {
    ASSERT_EQ(gathered.data<float>()[g], static_cast<float>((g / m) * 1000 + g % m));
  }

  const int64_t total = 2 * n_ + 1;
  Tensor in(Shape{total});
  for (int64_t i = 0; i < total; ++i) in.data<float>()[i] = static_cast<float>(r_ * 1000 + i);
  Tensor block(Shape{split_count(total, n_, r_)});
  world_.reduce_scatter(in.view(), block.view(), Stream());
  for (int64_t j = 0; j < block.numel(); ++j) {
    const int64_t g = split_offset(total, n_, r_) + j;
    ASSERT_EQ(block.data<float>()[j], static_cast<float>(1000 * n_ * (n_ - 1) / 2 + n_ * g));
  }
  world_.all_reduce(in.view(), ReduceOp::kMax, Stream());
  for (int64_t i = 0; i < total; ++i) {
    ASSERT_EQ(in.data<float>()[i], static_cast<float>((n_ - 1) * 1000 + i));
  }

  Tensor bits(Shape{m}, DType::kBF16);
  for (int64_t i = 0; i < m; ++i) bits.data<bf16>()[i] = float_to_bf16(r_ + 0.5f * i);
  Tensor all_bits(Shape{n_, m}, DType::kBF16);
  world_.all_gather(bits.view(), all_bits.view(), Stream());
  for (int64_t g = 0; g < n_ * m; ++g) {
    ASSERT_EQ(all_bits.data<bf16>()[g].bits, float_to_bf16((g / m) + 0.5f * (g % m)).bits);
  }

  Tensor codes(Shape{n_, 3}, DType::kI8);
  for (int64_t i = 0; i < 3 * n_; ++i) codes.data<int8_t>()[i] = static_cast<int8_t>(r_ - i);
  Tensor exchanged(Shape{n_, 3}, DType::kI8);
  world_.all_to_all(codes.view(), exchanged.view(), Stream());
  for (int p = 0; p < n_; ++p) {
    for (int64_t i = 0; i < 3; ++i) {
      ASSERT_EQ(exchanged.data<int8_t>()[p * 3 + i], static_cast<int8_t>(p - (r_ * 3 + i)));
    }
  }
}

TEST_F(CollectivesTest, TensorViewDtypeMismatchesAreCheckFailures) {
  Tensor f32(Shape{n_}), bf16s(Shape{n_}, DType::kBF16), out_bf16(Shape{n_ * n_}, DType::kBF16);
  const std::string mixed =
      check_message([&] { world_.all_gather(f32.view(), out_bf16.view(), Stream()); });
  EXPECT_NE(mixed.find("f32 and bf16"), std::string::npos) << mixed;
  const std::string reduced =
      check_message([&] { world_.all_reduce(bf16s.view(), ReduceOp::kSum, Stream()); });
  EXPECT_NE(reduced.find("reduce bf16 as f32"), std::string::npos) << reduced;
  if (n_ > 1) {  // every count splits into one block
    Tensor uneven(Shape{n_ + 1}), uneven_out(Shape{n_ + 1});
    const std::string blocks =
        check_message([&] { world_.all_to_all(uneven.view(), uneven_out.view(), Stream()); });
    EXPECT_NE(blocks.find("equal blocks"), std::string::npos) << blocks;
  }
  world_.barrier();
}

// kNoPeer turns either side of a transfer off: the receive buffer is left as it was.
TEST_F(CollectivesTest, NoPeerSkipsThatSideOfATransfer) {
  const std::vector<float> send = {1.0f, 2.0f};
  std::vector<float> recv = {-1.0f, -1.0f};
  world_.send_recv<float>(send, kNoPeer, recv, kNoPeer);
  EXPECT_EQ(recv, (std::vector<float>{-1.0f, -1.0f}));
  Request nothing = world_.irecv<float>(recv, kNoPeer);
  nothing.wait();
  EXPECT_EQ(recv, (std::vector<float>{-1.0f, -1.0f}));
}

// The runtime (the test main's MpiRuntime) has installed the hook that takes every rank down.
TEST_F(CollectivesTest, RuntimeInstallsTheAbortHook) {
  const AbortHook installed = set_abort_hook({});
  EXPECT_TRUE(static_cast<bool>(installed));
  set_abort_hook(installed);
}

TEST_F(CollectivesTest, CopiesShareOneCommunicator) {
  const Communicator halves = world_.split(r_ % 2, r_);
  const Communicator copy = halves;  // NOLINT(performance-unnecessary-copy-initialization)
  EXPECT_EQ(copy.impl(), halves.impl());
  int64_t sum = 1;
  copy.all_reduce<int64_t>({&sum, 1}, ReduceOp::kSum);
  EXPECT_EQ(sum, halves.size());
}

TEST_F(CollectivesTest, SplitAndSelfCommunicators) {
  const Communicator halves = world_.split(r_ % 2, r_);
  EXPECT_EQ(halves.size(), (n_ + 1 - r_ % 2) / 2);
  EXPECT_EQ(halves.rank(), r_ / 2);
  int64_t sum = r_;
  halves.all_reduce<int64_t>({&sum, 1}, ReduceOp::kSum);
  int64_t want = 0;
  for (int p = r_ % 2; p < n_; p += 2) want += p;
  EXPECT_EQ(sum, want);
  Communicator moved = Communicator::self();
  EXPECT_EQ(moved.size(), 1);
  moved = world_.split(0, -r_);  // keys reversed: rank order reverses
  EXPECT_EQ(moved.rank(), n_ - 1 - r_);
}

}  // namespace
}  // namespace maxctx

// The NCCL backend (mesh/nccl_communicator.h): every verb on device memory against the MPI
// backend's result on the same host data, every element type the verb takes. Values are small
// integers (floats too), so every sum is exact whatever order NCCL adds in, and the comparison is
// exact equality.
//
// Needs one GPU per rank: the main below exits 77 (ctest: skipped, label gpu) when a rank sees no
// GPU or two ranks share one (NCCL refuses them). On a one-GPU machine it therefore runs at np 1,
// where every verb still goes through NCCL (a 1-rank communicator); np 2 needs two GPUs.
#include "maxctx/mesh/nccl_communicator.h"

#include <cuda_runtime.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include "maxctx/core/check.h"
#include "maxctx/core/split.h"
#include "maxctx/mesh/communicator.h"
#include "maxctx/mesh/runtime.h"

namespace maxctx {
namespace {

int g_device = 0;

void cuda_ok(cudaError_t status, const char* what) {
  if (status != cudaSuccess) {
    throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(status));
  }
}

// Device memory holding n elements of T, filled from and read back into host vectors.
template <typename T>
class DeviceBuffer {
 public:
  explicit DeviceBuffer(size_t n) : n_(n) {
    if (n_ > 0) cuda_ok(cudaMalloc(&data_, n_ * sizeof(T)), "cudaMalloc");
  }
  explicit DeviceBuffer(const std::vector<T>& host) : DeviceBuffer(host.size()) { upload(host); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  ~DeviceBuffer() { cudaFree(data_); }

  void upload(const std::vector<T>& host) {
    cuda_ok(cudaMemcpy(data_, host.data(), n_ * sizeof(T), cudaMemcpyHostToDevice), "upload");
  }
  std::vector<T> download() const {
    std::vector<T> host(n_);
    cuda_ok(cudaMemcpy(host.data(), data_, n_ * sizeof(T), cudaMemcpyDeviceToHost), "download");
    return host;
  }
  std::span<T> span() { return {data_, n_}; }
  T* data() { return data_; }

 private:
  T* data_ = nullptr;
  size_t n_ = 0;
};

// Distinct small integers per rank, element and salt: exact in every element type.
template <typename T>
std::vector<T> values(int rank, size_t n, int salt) {
  std::vector<T> out(n);
  for (size_t i = 0; i < n; ++i) {
    out[i] = static_cast<T>((rank * 31 + static_cast<int>(i) * 7 + salt * 13) % 97 - 40);
  }
  return out;
}

class NcclCommunicatorTest : public testing::Test {
 protected:
  static void SetUpTestSuite() {
    world_ = new Communicator(Communicator::world());
    // The span verbs on device memory run on the stream the buffers' copies use (cudaMemcpy:
    // the legacy default stream).
    nccl_ = new Communicator(
        make_nccl_communicator(*world_, g_device).on(Stream(Device::kCuda, cudaStreamLegacy)));
  }
  static void TearDownTestSuite() {
    delete nccl_;
    delete world_;
  }
  const Communicator& mpi() const { return *world_; }
  const Communicator& nccl() const { return *nccl_; }
  int rank() const { return world_->rank(); }
  int size() const { return world_->size(); }

  static Communicator* world_;
  static Communicator* nccl_;
};
Communicator* NcclCommunicatorTest::world_ = nullptr;
Communicator* NcclCommunicatorTest::nccl_ = nullptr;

using Types = testing::Types<float, double, int32_t, int64_t, uint16_t, int8_t, uint8_t>;
using ReducibleTypes = testing::Types<float, double, int32_t, int64_t, int8_t, uint8_t>;

template <typename T>
class NcclMoveTest : public NcclCommunicatorTest {};
TYPED_TEST_SUITE(NcclMoveTest, Types);

template <typename T>
class NcclReduceTest : public NcclCommunicatorTest {};
TYPED_TEST_SUITE(NcclReduceTest, ReducibleTypes);

TYPED_TEST(NcclMoveTest, AllGatherEqualsMpiAlsoInPlace) {
  using T = TypeParam;
  const size_t part = 1000;
  const std::vector<T> mine = values<T>(this->rank(), part, 1);
  std::vector<T> expected(part * this->size());
  this->mpi().template all_gather<T>(mine, expected);

  DeviceBuffer<T> device_mine(mine);
  DeviceBuffer<T> out(part * this->size());
  this->nccl().template all_gather<T>(device_mine.span(), out.span());
  EXPECT_EQ(out.download(), expected);

  // In place: my part already sits at its offset in out.
  std::vector<T> staged(part * this->size(), T{0});
  std::copy(mine.begin(), mine.end(), staged.begin() + this->rank() * part);
  DeviceBuffer<T> in_place(staged);
  this->nccl().template all_gather<T>(in_place.span().subspan(this->rank() * part, part),
                                      in_place.span());
  EXPECT_EQ(in_place.download(), expected);
}

TYPED_TEST(NcclMoveTest, AllGatherUnevenEqualsMpi) {
  using T = TypeParam;
  for (const int64_t total : {int64_t{1}, int64_t{7} * this->size() + 3, int64_t{5000}}) {
    const int64_t count = split_count(total, this->size(), this->rank());
    const std::vector<T> mine = values<T>(this->rank(), static_cast<size_t>(count), 2);
    std::vector<T> expected(static_cast<size_t>(total));
    this->mpi().template all_gather_uneven<T>(mine, expected);
    DeviceBuffer<T> device_mine(mine);
    DeviceBuffer<T> out(static_cast<size_t>(total));
    this->nccl().template all_gather_uneven<T>(device_mine.span(), out.span());
    EXPECT_EQ(out.download(), expected) << "total " << total;
  }
}

TYPED_TEST(NcclMoveTest, AllToAllAndAllToAllvEqualMpi) {
  using T = TypeParam;
  const size_t part = 333;
  const std::vector<T> in = values<T>(this->rank(), part * this->size(), 3);
  std::vector<T> expected(in.size());
  this->mpi().template all_to_all<T>(in, expected);
  DeviceBuffer<T> device_in(in);
  DeviceBuffer<T> out(in.size());
  this->nccl().template all_to_all<T>(device_in.span(), out.span());
  EXPECT_EQ(out.download(), expected);

  // Uneven: rank r sends (r + p) % 3 * 50 elements to p (zero for some pairs).
  std::vector<int64_t> send_counts(this->size()), recv_counts(this->size());
  for (int p = 0; p < this->size(); ++p) {
    send_counts[p] = (this->rank() + p) % 3 * 50;
    recv_counts[p] = (p + this->rank()) % 3 * 50;
  }
  int64_t sent = 0, received = 0;
  for (int p = 0; p < this->size(); ++p) {
    sent += send_counts[p];
    received += recv_counts[p];
  }
  const std::vector<T> v_in = values<T>(this->rank(), static_cast<size_t>(sent), 4);
  std::vector<T> v_expected(static_cast<size_t>(received));
  this->mpi().template all_to_allv<T>(v_in, send_counts, v_expected, recv_counts);
  DeviceBuffer<T> device_v_in(v_in);
  DeviceBuffer<T> v_out(static_cast<size_t>(received));
  this->nccl().template all_to_allv<T>(device_v_in.span(), send_counts, v_out.span(), recv_counts);
  EXPECT_EQ(v_out.download(), v_expected);
}

TYPED_TEST(NcclMoveTest, BroadcastFromEveryRootEqualsMpi) {
  using T = TypeParam;
  for (int root = 0; root < this->size(); ++root) {
    std::vector<T> expected = values<T>(this->rank(), 4097, 5 + root);
    DeviceBuffer<T> data(expected);
    this->mpi().template broadcast<T>(expected, root);
    this->nccl().template broadcast<T>(data.span(), root);
    EXPECT_EQ(data.download(), expected) << "root " << root;
  }
}

TYPED_TEST(NcclMoveTest, SendRecvAndIsendIrecvAroundTheRing) {
  using T = TypeParam;
  const int right = (this->rank() + 1) % this->size();
  const int left = (this->rank() + this->size() - 1) % this->size();
  const std::vector<T> mine = values<T>(this->rank(), 2500, 6);
  std::vector<T> expected(mine.size());
  this->mpi().template send_recv<T>(mine, right, expected, left);

  DeviceBuffer<T> send(mine);
  DeviceBuffer<T> recv(mine.size());
  this->nccl().template send_recv<T>(send.span(), right, recv.span(), left);
  EXPECT_EQ(recv.download(), expected);

  // The ring's pattern: two sends and two receives posted, then waited for together (the
  // receives posted first on purpose: issued at the wait as one group, they cannot deadlock).
  const std::vector<T> second = values<T>(this->rank(), 77, 7);
  std::vector<T> second_expected(second.size());
  this->mpi().template send_recv<T>(second, right, second_expected, left);
  DeviceBuffer<T> send2(second);
  DeviceBuffer<T> recv2(second.size());
  DeviceBuffer<T> recv1(mine.size());
  std::vector<Request> in_flight;
  in_flight.push_back(this->nccl().template irecv<T>(recv1.span(), left, 1));
  in_flight.push_back(this->nccl().template irecv<T>(recv2.span(), left, 2));
  in_flight.push_back(this->nccl().template isend<T>(std::span<const T>(send.span()), right, 1));
  in_flight.push_back(this->nccl().template isend<T>(std::span<const T>(send2.span()), right, 2));
  wait_all(in_flight);
  EXPECT_EQ(recv1.download(), expected);
  EXPECT_EQ(recv2.download(), second_expected);

  // One request waited alone, and a request to nobody.
  DeviceBuffer<T> recv3(mine.size());
  Request r = this->nccl().template irecv<T>(recv3.span(), left);
  Request s = this->nccl().template isend<T>(std::span<const T>(send.span()), right);
  Request nobody = this->nccl().template isend<T>(std::span<const T>(send.span()), kNoPeer);
  r.wait();
  s.wait();
  nobody.wait();
  EXPECT_EQ(recv3.download(), expected);
}

TYPED_TEST(NcclReduceTest, AllReduceSumMaxMinEqualMpi) {
  using T = TypeParam;
  for (const ReduceOp op : {ReduceOp::kSum, ReduceOp::kMax, ReduceOp::kMin}) {
    // int8/uint8 sums would wrap differently only past their range: 3 small values per rank.
    std::vector<T> expected = values<T>(this->rank(), 3001, 8);
    if constexpr (sizeof(T) == 1) {
      for (T& v : expected) v = static_cast<T>((static_cast<int>(v) & 7) + (op == ReduceOp::kSum));
    }
    DeviceBuffer<T> data(expected);
    this->mpi().template all_reduce<T>(expected, op);
    this->nccl().template all_reduce<T>(data.span(), op);
    EXPECT_EQ(data.download(), expected) << "op " << static_cast<int>(op);
  }
}

TYPED_TEST(NcclReduceTest, ReduceScatterEvenAndUnevenEqualsMpi) {
  using T = TypeParam;
  for (const int64_t total : {int64_t{1000} * this->size(), int64_t{999} * this->size() + 5}) {
    std::vector<T> in = values<T>(this->rank(), static_cast<size_t>(total), 9);
    if constexpr (sizeof(T) == 1) {
      for (T& v : in) v = static_cast<T>(static_cast<int>(v) & 7);
    }
    std::vector<T> expected(static_cast<size_t>(split_count(total, this->size(), this->rank())));
    this->mpi().template reduce_scatter<T>(in, expected);
    DeviceBuffer<T> device_in(in);
    DeviceBuffer<T> out(expected.size());
    this->nccl().template reduce_scatter<T>(device_in.span(), out.span());
    EXPECT_EQ(out.download(), expected) << "total " << total;
  }
}

// The backend's stream must wait for work still queued on the verb's stream (here the legacy
// default stream): an upload enqueued there without any synchronisation is what the all_reduce
// reads.
TEST_F(NcclCommunicatorTest, FollowsTheLegacyDefaultStream) {
  const size_t n = size_t{16} << 20;  // 64 MiB: the copy is still running when the verb starts
  std::vector<float> host(n);
  for (size_t i = 0; i < n; ++i) host[i] = static_cast<float>(i % 1000);
  DeviceBuffer<float> data(n);
  cuda_ok(cudaMemsetAsync(data.data(), 0, n * sizeof(float), cudaStreamLegacy), "memset");
  cuda_ok(cudaMemcpyAsync(data.data(), host.data(), n * sizeof(float), cudaMemcpyHostToDevice,
                          cudaStreamLegacy),
          "copy");
  nccl().all_reduce<float>(data.span(), ReduceOp::kMax);
  EXPECT_EQ(data.download(), host);
}

// The same on a stream of the caller's that does not synchronize with the legacy default stream:
// a backend that followed the default stream instead of the given one would read the zeros.
TEST_F(NcclCommunicatorTest, FollowsTheStreamItIsGiven) {
  const size_t n = size_t{16} << 20;
  std::vector<float> host(n);
  for (size_t i = 0; i < n; ++i) host[i] = static_cast<float>(i % 1000 + 1);
  DeviceBuffer<float> data(n);
  cudaStream_t own = nullptr;
  cuda_ok(cudaStreamCreateWithFlags(&own, cudaStreamNonBlocking), "stream create");
  cuda_ok(cudaMemsetAsync(data.data(), 0, n * sizeof(float), own), "memset");
  cuda_ok(cudaMemcpyAsync(data.data(), host.data(), n * sizeof(float), cudaMemcpyHostToDevice, own),
          "copy");
  nccl().on(Stream(Device::kCuda, own)).all_reduce<float>(data.span(), ReduceOp::kMax);
  cuda_ok(cudaStreamSynchronize(own), "stream synchronize");
  EXPECT_EQ(data.download(), host);
  cuda_ok(cudaStreamDestroy(own), "stream destroy");
}

TEST_F(NcclCommunicatorTest, SplitAndBarrier) {
  const Communicator half = nccl().split(rank() % 2, rank());
  const Communicator mpi_half = mpi().split(rank() % 2, rank());
  ASSERT_EQ(half.size(), mpi_half.size());
  ASSERT_EQ(half.rank(), mpi_half.rank());
  std::vector<int64_t> expected = values<int64_t>(rank(), 100, 10);
  DeviceBuffer<int64_t> data(expected);
  mpi_half.all_reduce<int64_t>(expected, ReduceOp::kSum);
  half.all_reduce<int64_t>(data.span(), ReduceOp::kSum);
  EXPECT_EQ(data.download(), expected);
  half.barrier();
  nccl().barrier();
}

// Host memory, bf16 reductions and the host's stream are refused with one clear line (the check
// handler throws here instead of ending the job).
TEST_F(NcclCommunicatorTest, RefusesHostMemoryBf16ReductionsAndHostStreams) {
  set_check_handler([](const std::string& message) { throw std::runtime_error(message); });
  std::vector<float> host(10, 1.0f);
  try {
    nccl().all_reduce<float>(host, ReduceOp::kSum);
    ADD_FAILURE() << "a host buffer was accepted";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("not memory of GPU"), std::string::npos) << e.what();
  }
  DeviceBuffer<uint16_t> bits(10);
  try {
    nccl().all_reduce<uint16_t>(bits.span(), ReduceOp::kSum);
    ADD_FAILURE() << "a bf16 reduction was accepted";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("reduce bf16 as f32"), std::string::npos) << e.what();
  }
  DeviceBuffer<float> on_device(10);
  try {
    nccl().on(Stream()).all_reduce<float>(on_device.span(), ReduceOp::kSum);
    ADD_FAILURE() << "the host's stream was accepted for device memory";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("runs on a CUDA stream"), std::string::npos) << e.what();
  }
  set_check_handler({});
}

// Why this process cannot run the test ("" when it can): no GPU, or a GPU another rank of this
// host also drives. Every rank reaches the same answer.
std::string reason_to_skip(const Communicator& world) {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    cudaGetLastError();
    count = 0;
  }
  const char* local = std::getenv("OMPI_COMM_WORLD_LOCAL_RANK");
  g_device = count > 0 ? (local != nullptr ? std::atoi(local) : 0) % count : -1;
  constexpr size_t kField = 128;
  std::vector<uint8_t> mine(kField, 0);
  if (g_device >= 0) {
    char host[64] = {};
    gethostname(host, sizeof(host) - 1);
    char bus[32] = {};
    cudaDeviceGetPCIBusId(bus, sizeof(bus), g_device);
    const std::string id = std::string(host) + "/" + bus;
    std::copy_n(id.begin(), std::min(id.size(), kField - 1), mine.begin());
  }
  std::vector<uint8_t> all(kField * static_cast<size_t>(world.size()));
  world.all_gather<uint8_t>(mine, all);
  std::vector<std::string> ids;
  for (int r = 0; r < world.size(); ++r) {
    ids.emplace_back(reinterpret_cast<const char*>(all.data() + kField * r));
    if (ids.back().empty()) return "rank " + std::to_string(r) + " sees no CUDA device";
  }
  std::sort(ids.begin(), ids.end());
  if (std::adjacent_find(ids.begin(), ids.end()) != ids.end()) {
    return "two ranks share one GPU (" + ids.front() + "...), which NCCL refuses";
  }
  return "";
}

}  // namespace
}  // namespace maxctx

int main(int argc, char** argv) {
  maxctx::MpiRuntime runtime(&argc, &argv);
  testing::InitGoogleTest(&argc, argv);
  const maxctx::Communicator world = maxctx::Communicator::world();
  const std::string skip = maxctx::reason_to_skip(world);
  if (!skip.empty()) {
    if (world.rank() == 0) std::printf("nccl_communicator_test: SKIPPED: %s\n", skip.c_str());
    return 77;  // ctest SKIP_RETURN_CODE (gtest's own skip would exit 0, a pass)
  }
  int32_t any_failed = RUN_ALL_TESTS() != 0 ? 1 : 0;
  world.all_reduce<int32_t>({&any_failed, 1}, maxctx::ReduceOp::kMax);
  return any_failed;
}

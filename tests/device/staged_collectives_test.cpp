// Collectives on device memory staged through the host (mesh/device_collectives.h), with the
// emulated GPU's memory as the device: every TensorView verb on device views equals the same
// verb on host views, bit for bit, on 1 and 2 ranks.
#include <gtest/gtest.h>

#include <cstdint>
#include <numeric>
#include <vector>

#include "maxctx/core/split.h"
#include "maxctx/kernels/emulated/emulated_gpu.h"
#include "maxctx/kernels/host_transfer.h"
#include "maxctx/mesh/communicator.h"
#include "maxctx/mesh/device_collectives.h"

namespace maxctx {
namespace {

const kernels::Kernels& device() { return kernels::emulated::emulated_gpu_kernels(); }

Communicator staged_world() {
  Communicator world = Communicator::world();
  world.set_device_collectives(
      make_host_staged_communicator(world.shared_impl(), device().allocator()));
  return world;
}

std::vector<float> values(int64_t n, int salt) {
  std::vector<float> v(static_cast<size_t>(n));
  const int rank = Communicator::world().rank();
  for (int64_t i = 0; i < n; ++i) {
    v[i] = 0.25f * static_cast<float>((i * 7 + rank * 13 + salt) % 11) - 1.0f;
  }
  return v;
}

// A host tensor and a device tensor holding `v`.
struct Pair {
  Tensor host, dev;
  explicit Pair(const std::vector<float>& v)
      : host({static_cast<int64_t>(v.size())}),
        dev(device().empty({static_cast<int64_t>(v.size())})) {
    std::copy(v.begin(), v.end(), host.data<float>());
    kernels::upload_floats(device(), dev.view(), v);
  }
  std::vector<float> host_values() const {
    return {host.data<float>(), host.data<float>() + host.numel()};
  }
  std::vector<float> dev_values() const { return kernels::download_floats(device(), dev.view()); }
};

TEST(StagedCollectives, EveryVerbEqualsTheHostVerb) {
  const Communicator host = Communicator::world();
  const Communicator staged = staged_world();
  const int n = host.size(), me = host.rank();

  {  // all_gather
    const Pair mine(values(5, 1)), out(std::vector<float>(5 * n, 0.0f));
    host.all_gather(mine.host.view(), out.host.view(), Stream());
    staged.all_gather(mine.dev.view(), out.dev.view(), device().stream());
    EXPECT_EQ(out.host_values(), out.dev_values());
  }
  {  // all_gather_uneven
    const int64_t total = 7;
    const Pair mine(values(split_count(total, n, me), 2)), out(std::vector<float>(total, 0.0f));
    host.all_gather_uneven(mine.host.view(), out.host.view(), Stream());
    staged.all_gather_uneven(mine.dev.view(), out.dev.view(), device().stream());
    EXPECT_EQ(out.host_values(), out.dev_values());
  }
  {  // reduce_scatter
    const int64_t total = 9;
    const Pair in(values(total, 3)), out(std::vector<float>(split_count(total, n, me), 0.0f));
    host.reduce_scatter(in.host.view(), out.host.view(), Stream());
    staged.reduce_scatter(in.dev.view(), out.dev.view(), device().stream());
    EXPECT_EQ(out.host_values(), out.dev_values());
  }
  {  // all_reduce
    const Pair x(values(6, 4));
    host.all_reduce(x.host.view(), ReduceOp::kSum, Stream());
    staged.all_reduce(x.dev.view(), ReduceOp::kSum, device().stream());
    EXPECT_EQ(x.host_values(), x.dev_values());
  }
  {  // all_to_all
    const Pair in(values(3 * n, 5)), out(std::vector<float>(3 * n, 0.0f));
    host.all_to_all(in.host.view(), out.host.view(), Stream());
    staged.all_to_all(in.dev.view(), out.dev.view(), device().stream());
    EXPECT_EQ(out.host_values(), out.dev_values());
  }
  {  // all_to_allv: rank p sends p + 1 elements to every rank
    std::vector<int64_t> send(n, me + 1), recv(n);
    std::iota(recv.begin(), recv.end(), 1);
    const Pair in(values((me + 1) * n, 6));
    const Pair out(std::vector<float>(std::accumulate(recv.begin(), recv.end(), int64_t{0}), 0.0f));
    host.all_to_allv(in.host.view(), send, out.host.view(), recv, Stream());
    staged.all_to_allv(in.dev.view(), send, out.dev.view(), recv, device().stream());
    EXPECT_EQ(out.host_values(), out.dev_values());
  }
}

TEST(StagedCollectives, PointToPointAndMixedWaits) {
  const Communicator host = Communicator::world();
  const Communicator staged = staged_world();
  const int n = host.size(), me = host.rank();
  const int next = (me + 1) % n, prev = (me + n - 1) % n;
  {  // send_recv around the ring
    const Pair send(values(4, 7)), recv(std::vector<float>(4, 0.0f));
    host.send_recv(send.host.view(), next, recv.host.view(), prev, 3, Stream());
    staged.send_recv(send.dev.view(), next, recv.dev.view(), prev, 3, device().stream());
    EXPECT_EQ(recv.host_values(), recv.dev_values());
  }
  {  // isend/irecv of device views waited together with host ones (the ring's K/V and ids)
    const Pair send(values(8, 8)), recv(std::vector<float>(8, 0.0f));
    const std::vector<int32_t> ids_out = {me, me + 10};
    std::vector<int32_t> ids_in(2, -1);
    std::vector<Request> in_flight;
    in_flight.push_back(staged.isend(send.dev.view(), next, 1, device().stream()));
    in_flight.push_back(staged.isend(std::span<const int32_t>(ids_out), next, 2));
    in_flight.push_back(staged.irecv(recv.dev.view(), prev, 1, device().stream()));
    in_flight.push_back(staged.irecv(std::span<int32_t>(ids_in), prev, 2));
    wait_all(in_flight);
    host.send_recv(send.host.view(), next, recv.host.view(), prev, 1, Stream());
    EXPECT_EQ(recv.host_values(), recv.dev_values());
    EXPECT_EQ(ids_in, (std::vector<int32_t>{prev, prev + 10}));
  }
}

}  // namespace
}  // namespace maxctx

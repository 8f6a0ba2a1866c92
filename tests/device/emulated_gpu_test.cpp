// The emulated GPU (kernels/emulated/) and the choice of collectives for device memory
// (mesh/device_collectives.h), on one process.
#include "maxctx/kernels/emulated/emulated_gpu.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "maxctx/core/check.h"
#include "maxctx/kernels/host_transfer.h"
#include "maxctx/kernels/kernels.h"
#include "maxctx/mesh/device_collectives.h"

namespace maxctx {
namespace {

const kernels::Kernels& emulated() { return kernels::emulated::emulated_gpu_kernels(); }
const kernels::Kernels& cpu() { return kernels::backend(Device::kCpu); }

// A failed MAXCTX_CHECK throws here instead of ending the process.
class ThrowingChecks {
 public:
  ThrowingChecks() {
    set_check_handler([](const std::string& message) { throw Error(message); });
  }
  ~ThrowingChecks() { set_check_handler({}); }
};

TEST(EmulatedGpu, PosesAsCudaWithDisguisedMemory) {
  EXPECT_EQ(emulated().device(), Device::kCuda);
  const Tensor t = emulated().empty({16});
  EXPECT_EQ(t.device(), Device::kCuda);
  EXPECT_TRUE(kernels::emulated::is_disguised(t.view().raw()));
  const Tensor host({16});
  EXPECT_FALSE(kernels::emulated::is_disguised(host.view().raw()));
}

TEST(EmulatedGpuDeathTest, HostDereferenceOfDeviceMemoryFaults) {
  GTEST_FLAG_SET(death_test_style, "fast");  // a re-executed child would start MPI again
  const Tensor t = emulated().empty({16});
  const auto* device_memory = static_cast<const volatile float*>(t.view().raw());
  // What code above kernels/ that reads tensor memory itself would do: on a GPU it reads
  // garbage or faults later; here it faults at once.
  EXPECT_DEATH({ [[maybe_unused]] const float x = device_memory[3]; }, "");
}

// Residency (Allocator::commit / decommit): what fsdp's full buffers rely on, counted as a GPU
// would count it.
TEST(EmulatedMemory, CountsCommittedBytesByPageAndRecommittedPagesReadZero) {
  const Allocator& a = emulated().allocator();
  const int64_t before = a.committed_bytes().value().now;
  Tensor t = emulated().empty_reserved({int64_t{1} << 20});  // 4 MiB of f32, nothing committed
  EXPECT_EQ(a.committed_bytes().value().now, before);
  EXPECT_EQ(a.resident_bytes(t.view().raw(), t.view().bytes()), 0u);
  const TensorView mib = t.view().elements(0, int64_t{1} << 18);  // the first MiB
  emulated().commit(mib);
  EXPECT_EQ(a.committed_bytes().value().now - before, int64_t{1} << 20);
  emulated().commit(mib);  // committing committed pages changes nothing
  EXPECT_EQ(a.committed_bytes().value().now - before, int64_t{1} << 20);
  kernels::upload_floats(emulated(), mib, std::vector<float>(size_t{1} << 18, 3.0f));

  // A range that does not end on a page: the partial page stays committed, zeroed.
  const TensorView ragged = t.view().elements(0, (int64_t{1} << 18) - 100);
  emulated().decommit(ragged);
  EXPECT_EQ(a.committed_bytes().value().now - before, 4096);
  const std::vector<float> tail =
      kernels::download_floats(emulated(), mib.elements((int64_t{1} << 18) - 1024, 1024));
  for (int i = 0; i < 1024; ++i) ASSERT_EQ(tail[i], i < 924 ? 0.0f : 3.0f) << i;
  emulated().commit(mib);
  for (float v : kernels::download_floats(emulated(), mib.elements(0, 4096))) ASSERT_EQ(v, 0.0f);

  // The peak since reset_peak, and everything handed back when the tensor goes.
  a.reset_peak();
  const int64_t now = a.committed_bytes().value().now;
  emulated().commit(t.view());
  emulated().decommit(t.view());
  EXPECT_EQ(a.committed_bytes().value().peak, now + (int64_t{3} << 20));
  t = Tensor();
  EXPECT_EQ(a.committed_bytes().value().now, before);
  EXPECT_FALSE(host_allocator().committed_bytes().has_value());  // the host does not count
}

TEST(EmulatedMemoryDeathTest, AnOpOnDecommittedMemoryFaults) {
  GTEST_FLAG_SET(death_test_style, "fast");  // a re-executed child would start MPI again
  const Tensor t = emulated().empty({int64_t{1} << 16});
  const TensorView unit = t.view().elements(int64_t{1} << 14, int64_t{1} << 14);
  emulated().decommit(unit);
  // What fsdp's contract forbids (weights read between after_use and before_use): on a GPU an
  // illegal address, here a fault at once instead of a silent read of zeros.
  EXPECT_DEATH(emulated().fill_zero(unit), "");
  emulated().commit(unit);
  emulated().fill_zero(unit);  // fine again
}

TEST(EmulatedGpu, CopiesCrossTheDisguise) {
  const std::vector<float> values = {1.5f, -2.0f, 3.25f, 0.0f, 7.0f};
  const Tensor t = emulated().empty({5});
  kernels::upload_floats(emulated(), t.view(), values);
  EXPECT_EQ(kernels::download_floats(emulated(), t.view()), values);
  // bf16 through the backend's copy op, as the cpu backend rounds.
  const Tensor b = emulated().empty({5}, DType::kBF16);
  kernels::upload_floats(emulated(), b.view(), values);
  const Tensor b_cpu = cpu().empty({5}, DType::kBF16);
  kernels::upload_floats(cpu(), b_cpu.view(), values);
  EXPECT_EQ(kernels::download_floats(emulated(), b.view()),
            kernels::download_floats(cpu(), b_cpu.view()));
}

// Its ops equal the cpu backend's bit for bit: tests/kernels/backend_conformance_test.cpp.

// copy_to_host_async's bytes are the host's only once an event or synchronize covers them: read
// earlier, the memory still holds what it held, as it may on a GPU.
TEST(EmulatedGpu, AsyncDownloadsArriveWhenSynchronizedNotBefore) {
  const std::vector<float> values = {1.5f, -2.0f, 3.25f, 7.0f};
  const Tensor t = emulated().empty({4});
  kernels::upload_floats(emulated(), t.view(), values);
  const std::vector<float> stale(4, -1.0f);
  std::vector<float> first = stale, second = stale, third = stale;
  kernels::Event first_arrived = emulated().copy_to_host_async(first.data(), t.view().raw(), 16);
  kernels::Event second_arrived = emulated().copy_to_host_async(second.data(), t.view().raw(), 16);
  EXPECT_EQ(first, stale);
  EXPECT_EQ(second, stale);
  EXPECT_FALSE(first_arrived.done());
  second_arrived.synchronize();  // in stream order: the first download has arrived too
  EXPECT_EQ(first, values);
  EXPECT_EQ(second, values);
  EXPECT_TRUE(first_arrived.done());
  // An event recorded after a download covers it; so does the backend's synchronize().
  kernels::Event third_arrived = emulated().copy_to_host_async(third.data(), t.view().raw(), 16);
  kernels::Event after = emulated().record_event();
  EXPECT_EQ(third, stale);
  after.synchronize();
  EXPECT_EQ(third, values);
  std::vector<float> fourth = stale;
  kernels::Event fourth_arrived = emulated().copy_to_host_async(fourth.data(), t.view().raw(), 16);
  emulated().synchronize();
  EXPECT_EQ(fourth, values);
  EXPECT_TRUE(fourth_arrived.done());
}

TEST(EmulatedGpu, HostIndexArrayIsAnErrorNamingTheOp) {
  const ThrowingChecks checks;
  const Tensor table = emulated().empty({4, 3});
  const Tensor out = emulated().empty({2, 3});
  const std::vector<int32_t> host_tokens = {1, 2};  // left on the host: a placement bug
  try {
    emulated().embedding_forward(out.view(), host_tokens.data(), table.view());
    FAIL() << "a host index array was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("embedding_forward was given host memory"),
              std::string::npos)
        << e.what();
  }
}

TEST(EmulatedGpu, HostTensorIsAnError) {
  const ThrowingChecks checks;
  const Tensor device = emulated().empty({4});
  const Tensor host({4});
  EXPECT_THROW(emulated().copy(device.view(), host.view()), Error);
}

// ---- which collectives move device memory ----

std::vector<DeviceIdentity> ranks(std::initializer_list<std::pair<const char*, const char*>> l) {
  std::vector<DeviceIdentity> out;
  for (const auto& [host, bus] : l) out.push_back({host, bus});
  return out;
}

TEST(DeviceCollectivesChoice, DistinctGpusUseNccl) {
  const auto r = ranks({{"a", "0000:19:00.0"}, {"a", "0000:3b:00.0"}, {"b", "0000:19:00.0"}});
  const DeviceCollectivesChoice choice = choose_device_collectives(r, true);
  EXPECT_EQ(choice.kind, DeviceCollectives::kNccl);
  EXPECT_EQ(choice.reason, "3 ranks on 3 GPUs: collectives over NCCL");
}

TEST(DeviceCollectivesChoice, SharedGpuStagesThroughTheHost) {
  const auto r = ranks({{"a", "0000:19:00.0"}, {"a", "0000:19:00.0"}});
  const DeviceCollectivesChoice choice = choose_device_collectives(r, true);
  EXPECT_EQ(choice.kind, DeviceCollectives::kHostStaging);
  EXPECT_EQ(choice.reason,
            "2 ranks share GPU 0000:19:00.0: collectives over MPI with host staging (NCCL "
            "refuses two ranks on one GPU)");
  // One shared pair among distinct ones is enough.
  const auto mixed = ranks({{"a", "0000:19:00.0"}, {"a", "0000:3b:00.0"}, {"a", "0000:3b:00.0"}});
  EXPECT_EQ(choose_device_collectives(mixed, true).kind, DeviceCollectives::kHostStaging);
}

TEST(DeviceCollectivesChoice, SameBusIdOnAnotherHostIsAnotherGpu) {
  const auto r = ranks({{"a", "0000:19:00.0"}, {"b", "0000:19:00.0"}});
  EXPECT_EQ(choose_device_collectives(r, true).kind, DeviceCollectives::kNccl);
}

TEST(DeviceCollectivesChoice, EmulatedGpuOneRankOrNoNcclStage) {
  const auto emulated_ranks = ranks({{"a", kEmulatedBusId}, {"a", kEmulatedBusId}});
  EXPECT_EQ(choose_device_collectives(emulated_ranks, true).kind, DeviceCollectives::kHostStaging);
  EXPECT_EQ(choose_device_collectives(emulated_ranks, true).reason,
            "2 ranks on the emulated GPU: collectives over MPI with host staging");
  EXPECT_EQ(choose_device_collectives(ranks({{"a", "0000:19:00.0"}}), true).kind,
            DeviceCollectives::kHostStaging);
  const auto distinct = ranks({{"a", "0000:19:00.0"}, {"a", "0000:3b:00.0"}});
  const DeviceCollectivesChoice no_nccl = choose_device_collectives(distinct, false);
  EXPECT_EQ(no_nccl.kind, DeviceCollectives::kHostStaging);
  EXPECT_EQ(no_nccl.reason, "this build has no NCCL: collectives over MPI with host staging");
}

}  // namespace
}  // namespace maxctx

// Device collectives (device_collectives.h): the choice per group, the host-staged backend, and
// the set-up over a mesh.
#include "maxctx/mesh/device_collectives.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <numeric>
#include <utility>
#include <vector>

#include "maxctx/core/check.h"
#include "maxctx/core/log.h"
#include "maxctx/core/split.h"

namespace maxctx {
namespace {

size_t element_bytes(ElementType type) {
  return visit_element_type(type, []<typename T>() { return sizeof(T); });
}

// Uninitialised host bytes (a staging buffer is always written whole before it is read).
class HostBuffer {
 public:
  explicit HostBuffer(size_t bytes) : bytes_(new std::byte[std::max<size_t>(bytes, 1)]) {}
  std::byte* data() const { return bytes_.get(); }

 private:
  std::unique_ptr<std::byte[]> bytes_;
};

// An isend or irecv through a host buffer: the send's buffer was filled before MPI got it; the
// receive's is copied to its device destination once MPI completes it.
class StagedRequest final : public RequestImpl {
 public:
  StagedRequest(std::unique_ptr<RequestImpl> host, HostBuffer buffer, void* device_destination,
                size_t bytes, const Allocator& allocator)
      : host_(std::move(host)),
        buffer_(std::move(buffer)),
        device_destination_(device_destination),
        bytes_(bytes),
        allocator_(allocator) {}

  void wait() override {
    host_->wait();
    finish();
  }
  void wait_all(std::span<RequestImpl* const> batch) override {
    std::vector<RequestImpl*> host;
    std::vector<StagedRequest*> staged;
    for (RequestImpl* request : batch) {
      staged.push_back(dynamic_cast<StagedRequest*>(request));
      MAXCTX_CHECK(staged.back() != nullptr, "wait_all over requests of different backends");
      host.push_back(staged.back()->host_.get());
    }
    host.front()->wait_all(host);
    for (StagedRequest* request : staged) request->finish();
  }

 private:
  void finish() {
    if (device_destination_ != nullptr) {
      allocator_.copy_from_host(device_destination_, buffer_.data(), bytes_);
    }
    device_destination_ = nullptr;
  }

  std::unique_ptr<RequestImpl> host_;
  HostBuffer buffer_;
  void* device_destination_;  // null for a send, and once a receive is copied
  size_t bytes_;
  const Allocator& allocator_;
};

class HostStagedCommunicator final : public CommunicatorImpl {
 public:
  HostStagedCommunicator(std::shared_ptr<CommunicatorImpl> host, const Allocator& allocator)
      : host_(std::move(host)), allocator_(allocator) {
    set_label(host_->label());
  }

  int rank() const override { return host_->rank(); }
  int size() const override { return host_->size(); }
  std::shared_ptr<CommunicatorImpl> split(int color, int key) const override {
    return std::make_shared<HostStagedCommunicator>(host_->split(color, key), allocator_);
  }

  // Every verb finishes before it returns: the allocator's copies are synchronous, which on a
  // device waits for the work issued before them (the cuda backend's one stream), so `stream`
  // is not used; the host backend runs on the host's.
  void all_gather(const void* mine, void* out, int64_t part, ElementType type,
                  const Stream& /*stream*/) const override {
    const HostBuffer in = download(mine, part, type);
    const HostBuffer gathered(bytes(part * size(), type));
    host_->all_gather(in.data(), gathered.data(), part, type, Stream());
    upload(out, gathered, part * size(), type);
  }
  void all_gather_uneven(const void* mine, void* out, int64_t total, ElementType type,
                         const Stream& /*stream*/) const override {
    const HostBuffer in = download(mine, split_count(total, size(), rank()), type);
    const HostBuffer gathered(bytes(total, type));
    host_->all_gather_uneven(in.data(), gathered.data(), total, type, Stream());
    upload(out, gathered, total, type);
  }
  void reduce_scatter(const void* in, void* out, int64_t total, ElementType type,
                      ReduceScatterAlgorithm algorithm, const Stream& /*stream*/) const override {
    const HostBuffer all = download(in, total, type);
    const int64_t mine = split_count(total, size(), rank());
    const HostBuffer reduced(bytes(mine, type));
    host_->reduce_scatter(all.data(), reduced.data(), total, type, algorithm, Stream());
    upload(out, reduced, mine, type);
  }
  void all_reduce(void* in_out, int64_t count, ElementType type, ReduceOp op,
                  const Stream& /*stream*/) const override {
    const HostBuffer values = download(in_out, count, type);
    host_->all_reduce(values.data(), count, type, op, Stream());
    upload(in_out, values, count, type);
  }
  void all_to_all(const void* in, void* out, int64_t part, ElementType type,
                  const Stream& /*stream*/) const override {
    const HostBuffer sent = download(in, part * size(), type);
    const HostBuffer received(bytes(part * size(), type));
    host_->all_to_all(sent.data(), received.data(), part, type, Stream());
    upload(out, received, part * size(), type);
  }
  void all_to_allv(const void* in, const int64_t* send_counts, void* out,
                   const int64_t* recv_counts, ElementType type,
                   const Stream& /*stream*/) const override {
    const int64_t sent_total = std::accumulate(send_counts, send_counts + size(), int64_t{0});
    const int64_t received_total = std::accumulate(recv_counts, recv_counts + size(), int64_t{0});
    const HostBuffer sent = download(in, sent_total, type);
    const HostBuffer received(bytes(received_total, type));
    host_->all_to_allv(sent.data(), send_counts, received.data(), recv_counts, type, Stream());
    upload(out, received, received_total, type);
  }
  void broadcast(void* data, int64_t count, ElementType type, int root,
                 const Stream& /*stream*/) const override {
    const HostBuffer values =
        rank() == root ? download(data, count, type) : HostBuffer(bytes(count, type));
    host_->broadcast(values.data(), count, type, root, Stream());
    if (rank() != root) upload(data, values, count, type);
  }

  void send_recv(const void* send, int64_t send_count, int dest, void* recv, int64_t recv_count,
                 int source, ElementType type, int tag, const Stream& /*stream*/) const override {
    const HostBuffer sent = download(send, dest == kNoPeer ? 0 : send_count, type);
    const HostBuffer received(bytes(recv_count, type));
    host_->send_recv(sent.data(), send_count, dest, received.data(), recv_count, source, type, tag,
                     Stream());
    if (source != kNoPeer) upload(recv, received, recv_count, type);
  }
  std::unique_ptr<RequestImpl> isend(const void* data, int64_t count, ElementType type, int dest,
                                     int tag, const Stream& /*stream*/) const override {
    HostBuffer sent = download(data, count, type);
    std::unique_ptr<RequestImpl> host = host_->isend(sent.data(), count, type, dest, tag, Stream());
    return std::make_unique<StagedRequest>(std::move(host), std::move(sent), nullptr, 0,
                                           allocator_);
  }
  std::unique_ptr<RequestImpl> irecv(void* data, int64_t count, ElementType type, int source,
                                     int tag, const Stream& /*stream*/) const override {
    HostBuffer received(bytes(count, type));
    std::unique_ptr<RequestImpl> host =
        host_->irecv(received.data(), count, type, source, tag, Stream());
    return std::make_unique<StagedRequest>(std::move(host), std::move(received), data,
                                           bytes(count, type), allocator_);
  }

  void barrier() const override { host_->barrier(); }

 private:
  static size_t bytes(int64_t count, ElementType type) {
    return static_cast<size_t>(count) * element_bytes(type);
  }
  HostBuffer download(const void* device, int64_t count, ElementType type) const {
    HostBuffer host(bytes(count, type));
    allocator_.copy_to_host(host.data(), device, bytes(count, type));
    return host;
  }
  void upload(void* device, const HostBuffer& host, int64_t count, ElementType type) const {
    allocator_.copy_from_host(device, host.data(), bytes(count, type));
  }

  std::shared_ptr<CommunicatorImpl> host_;
  const Allocator& allocator_;
};

// Fixed-width fields of the identity table gathered over a group (bytes, NUL-padded).
constexpr size_t kHostField = 256;
constexpr size_t kBusField = 64;

std::vector<DeviceIdentity> gather_identities(const Communicator& group,
                                              const DeviceIdentity& mine) {
  std::vector<uint8_t> row(kHostField + kBusField, 0);
  std::copy_n(mine.host.begin(), std::min(mine.host.size(), kHostField - 1), row.begin());
  std::copy_n(mine.bus_id.begin(), std::min(mine.bus_id.size(), kBusField - 1),
              row.begin() + kHostField);
  std::vector<uint8_t> table(row.size() * static_cast<size_t>(group.size()));
  group.all_gather<uint8_t>(row, table);
  std::vector<DeviceIdentity> ranks(static_cast<size_t>(group.size()));
  for (size_t r = 0; r < ranks.size(); ++r) {
    const char* at = reinterpret_cast<const char*>(table.data() + r * row.size());
    ranks[r].host = std::string(at, strnlen(at, kHostField));
    ranks[r].bus_id = std::string(at + kHostField, strnlen(at + kHostField, kBusField));
  }
  return ranks;
}

}  // namespace

DeviceCollectivesChoice choose_device_collectives(std::span<const DeviceIdentity> ranks,
                                                  bool nccl_available) {
  const auto staged = [](std::string why) {
    return DeviceCollectivesChoice{DeviceCollectives::kHostStaging,
                                   why + ": collectives over MPI with host staging"};
  };
  if (ranks.size() <= 1) return staged("one rank");  // nothing to move: no NCCL set-up
  if (std::any_of(ranks.begin(), ranks.end(),
                  [](const DeviceIdentity& r) { return r.bus_id == kEmulatedBusId; })) {
    return staged(
        fmt::format("{} rank{} on the emulated GPU", ranks.size(), ranks.size() == 1 ? "" : "s"));
  }
  for (const DeviceIdentity& r : ranks) {
    const auto sharing = std::count_if(ranks.begin(), ranks.end(), [&](const DeviceIdentity& o) {
      return o.host == r.host && o.bus_id == r.bus_id;
    });
    if (sharing > 1) {
      DeviceCollectivesChoice choice =
          staged(fmt::format("{} ranks share GPU {}", sharing, r.bus_id));
      choice.reason += " (NCCL refuses two ranks on one GPU)";
      return choice;
    }
  }
  if (!nccl_available) return staged("this build has no NCCL");
  return {DeviceCollectives::kNccl,
          fmt::format("{} ranks on {} GPUs: collectives over NCCL", ranks.size(), ranks.size())};
}

std::shared_ptr<CommunicatorImpl> make_host_staged_communicator(
    std::shared_ptr<CommunicatorImpl> host, const Allocator& allocator) {
  MAXCTX_CHECK(host != nullptr, "host staging needs a host communicator");
  return std::make_shared<HostStagedCommunicator>(std::move(host), allocator);
}

void set_up_device_collectives(Mesh& mesh, const DeviceIdentity& mine, const Allocator& allocator,
                               const NcclFactory& nccl) {
  mesh.set_device_collectives([&](const Communicator& group) -> std::shared_ptr<CommunicatorImpl> {
    const std::vector<DeviceIdentity> ranks = gather_identities(group, mine);
    const DeviceCollectivesChoice choice = choose_device_collectives(ranks, nccl != nullptr);
    const std::string name = group.trace_name();
    if (group.size() > 1 && name != "world") {
      log::info("{} {}: {}", name, name.find('+') == std::string::npos ? "axis" : "axes",
                choice.reason);
    }
    if (choice.kind == DeviceCollectives::kNccl) return nccl(group).shared_impl();
    return make_host_staged_communicator(group.shared_impl(), allocator);
  });
}

}  // namespace maxctx

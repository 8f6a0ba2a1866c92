// The NCCL backend's verbs (see nccl_communicator.h). Each blocking verb: issue the point-to-point
// transfers still waiting (so every rank issues its NCCL operations in the same order), make the
// backend's stream wait for the verb's stream, enqueue the NCCL call(s), then wait on the host
// for an event recorded after them, polling NCCL's asynchronous error so that a failed peer is
// one error line rather than a hang. The collective watchdog (WaitScope, set by Communicator
// around every verb) watches that host wait like any other.
//
// NCCL has no all-gather-v or reduce-scatter-v: the uneven parts (split_counts) are a group of
// broadcasts (one per owner) and a group of reduces (one per owner). The all-to-alls are groups
// of ncclSend/ncclRecv, the rank's own block included, so every verb goes through NCCL even on
// one rank.
#include "maxctx/mesh/nccl_communicator.h"

#if MAXCTX_HAVE_CUDA

#include <nccl.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "maxctx/core/check.h"
#include "maxctx/core/split.h"
#include "maxctx/mesh/collective_watchdog.h"
#include "maxctx/mesh/communicator_impl.h"
#include "maxctx/mesh/mpi/mpi_communicator.h"

namespace maxctx {
namespace {

void check_cuda(cudaError_t status, const char* what) {
  MAXCTX_CHECK(status == cudaSuccess, "CUDA {} failed: {} ({})", what, cudaGetErrorString(status),
               cudaGetErrorName(status));
}

// NCCL's own sentence for the failure, plus its last detailed message (ncclGetLastError), which
// names the cause ("Duplicate GPU detected: rank 1 and rank 0 both on CUDA device 19000").
void check_nccl(ncclResult_t status, const char* what, const std::string& over) {
  if (status == ncclSuccess) return;
  const char* detail = ncclGetLastError(nullptr);
  const bool has_detail = detail != nullptr && detail[0] != '\0';
  MAXCTX_CHECK(
      status == ncclSuccess, "NCCL {} over {} failed: {}{}{}{}", what, over,
      ncclGetErrorString(status), has_detail ? ": " : "", has_detail ? detail : "",
      status == ncclInvalidUsage
          ? " (if two ranks share one GPU: NCCL refuses them; such groups stage through the host)"
          : "");
}

ncclDataType_t nccl_type(ElementType type) {
  switch (type) {
    case ElementType::kF32:
      return ncclFloat32;
    case ElementType::kF64:
      return ncclFloat64;
    case ElementType::kI32:
      return ncclInt32;
    case ElementType::kI64:
      return ncclInt64;
    case ElementType::kU16:
      return ncclBfloat16;  // moved only: check_reducible refuses to reduce it
    case ElementType::kI8:
      return ncclInt8;
    case ElementType::kU8:
      break;
  }
  return ncclUint8;
}

size_t element_bytes(ElementType type) {
  return visit_element_type(type, []<typename T>() { return sizeof(T); });
}

ncclRedOp_t nccl_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
      return ncclSum;
    case ReduceOp::kMax:
      return ncclMax;
    case ReduceOp::kMin:
      break;
  }
  return ncclMin;
}

void check_reducible(const char* verb, ElementType type) {
  MAXCTX_CHECK(type != ElementType::kU16,
               "{}: uint16_t carries bf16 bits, which the NCCL backend moves but never reduces "
               "(reduce bf16 as f32)",
               verb);
}

// The CUDA stream a verb runs on: the one the caller's kernels backend issues to. The host's
// stream here would mean device views paired with a host backend's stream: refused in one line.
cudaStream_t cuda_stream(const Stream& stream, const char* verb, const std::string& over) {
  MAXCTX_CHECK(stream.device() == Device::kCuda,
               "{} over {}: the NCCL backend runs on a CUDA stream and was given the {} stream "
               "(pass the cuda backend's Kernels::stream())",
               verb, over, device_name(stream.device()));
  return static_cast<cudaStream_t>(stream.queue());
}

const std::byte* at(const void* base, int64_t elements, ElementType type) {
  return static_cast<const std::byte*>(base) + static_cast<size_t>(elements) * element_bytes(type);
}
std::byte* at(void* base, int64_t elements, ElementType type) {
  return static_cast<std::byte*>(base) + static_cast<size_t>(elements) * element_bytes(type);
}

// A CUDA event without timing (the cheap kind), destroyed with its owner.
class Event {
 public:
  Event() { check_cuda(cudaEventCreateWithFlags(&event_, cudaEventDisableTiming), "event create"); }
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;
  ~Event() { cudaEventDestroy(event_); }
  cudaEvent_t get() const { return event_; }

 private:
  cudaEvent_t event_ = nullptr;
};

// A posted isend or irecv. `ready` was recorded on the posting verb's stream when it was posted
// (the data, or the buffer's last reader, is enqueued before it); `done` is recorded on the
// backend's stream after the group that issued it.
struct Transfer {
  bool send = false;
  void* data = nullptr;
  int64_t count = 0;
  ElementType type = ElementType::kF32;
  int peer = 0;
  Event ready;
  std::shared_ptr<Event> done;  // null until issued
};

// What the communicator and its pending requests share: the NCCL communicator, the stream, and
// the transfers posted but not yet issued. Freed with the last of them.
class NcclState {
 public:
  NcclState(ncclComm_t comm, int device, std::string label)
      : comm_(comm), device_(device), label_(std::move(label)) {
    check_cuda(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "stream create");
  }
  NcclState(const NcclState&) = delete;
  NcclState& operator=(const NcclState&) = delete;
  // Teardown may run after the CUDA runtime has gone (static destruction at exit): errors are
  // ignored here, every transfer having been waited for by its Request.
  ~NcclState() {
    cudaStreamSynchronize(stream_);
    ncclCommDestroy(comm_);
    cudaStreamDestroy(stream_);
  }

  ncclComm_t comm() const { return comm_; }
  cudaStream_t stream() const { return stream_; }
  const std::string& label() const { return label_; }

  void nccl(ncclResult_t status, const char* what) const { check_nccl(status, what, label_); }

  // The backend's stream waits for everything enqueued on `caller` so far.
  void follow(cudaStream_t caller) {
    check_cuda(cudaEventRecord(caller_reached_.get(), caller), "event record");
    check_cuda(cudaStreamWaitEvent(stream_, caller_reached_.get(), 0), "stream wait");
  }

  // Every buffer a verb gets must be memory of this communicator's GPU: a host pointer would
  // otherwise be an illegal address inside an NCCL kernel, a sticky error far from its cause.
  void check_device_memory(const void* data, int64_t count, const char* verb,
                           const char* role) const {
    if (count == 0) return;
    cudaPointerAttributes attributes{};
    const cudaError_t status = cudaPointerGetAttributes(&attributes, data);
    if (status != cudaSuccess) cudaGetLastError();  // not sticky: clear it, report below
    const bool on_device =
        status == cudaSuccess &&
        (attributes.type == cudaMemoryTypeDevice || attributes.type == cudaMemoryTypeManaged) &&
        attributes.device == device_;
    MAXCTX_CHECK(on_device,
                 "{} over {}: the {} buffer is not memory of GPU {} (the NCCL backend moves "
                 "device memory only; host tensors go to the host communicator)",
                 verb, label_, role, device_);
  }

  void post(std::shared_ptr<Transfer> transfer, cudaStream_t caller) {
    check_cuda(cudaEventRecord(transfer->ready.get(), caller), "event record");
    unissued_.push_back(std::move(transfer));
  }

  // Issues every posted transfer in one NCCL group (a ring's sends and receives together), each
  // after its own `ready` event. Does not wait.
  void issue_pending() {
    if (unissued_.empty()) return;
    for (const auto& transfer : unissued_) {
      check_cuda(cudaStreamWaitEvent(stream_, transfer->ready.get(), 0), "stream wait");
    }
    nccl(ncclGroupStart(), "group start (isend/irecv)");
    for (const auto& transfer : unissued_) {
      const auto count = static_cast<size_t>(transfer->count);
      const ncclDataType_t type = nccl_type(transfer->type);
      if (transfer->send) {
        nccl(ncclSend(transfer->data, count, type, transfer->peer, comm_, stream_), "isend");
      } else {
        nccl(ncclRecv(transfer->data, count, type, transfer->peer, comm_, stream_), "irecv");
      }
    }
    nccl(ncclGroupEnd(), "group end (isend/irecv)");
    auto done = std::make_shared<Event>();
    check_cuda(cudaEventRecord(done->get(), stream_), "event record");
    for (const auto& transfer : unissued_) transfer->done = done;
    unissued_.clear();
  }

  // Host wait for everything enqueued on the backend's stream so far.
  void wait_for_stream(const char* verb) {
    check_cuda(cudaEventRecord(stream_done_.get(), stream_), "event record");
    wait_for(stream_done_.get(), verb);
  }

  // Polls `event` rather than blocking in cudaEventSynchronize, so that an asynchronous NCCL
  // error (a peer gone, a network failure) ends the wait with NCCL's message instead of a hang.
  void wait_for(cudaEvent_t event, const char* verb) const {
    for (int polls = 0;; ++polls) {
      const cudaError_t status = cudaEventQuery(event);
      if (status == cudaSuccess) return;
      if (status != cudaErrorNotReady) check_cuda(status, verb);
      ncclResult_t async_error = ncclSuccess;
      nccl(ncclCommGetAsyncError(comm_, &async_error), "async error query");
      if (async_error != ncclInProgress) nccl(async_error, verb);
      // Short operations finish within the first polls; longer ones should not spin a core.
      if (polls < 1000) {
        std::this_thread::yield();
      } else {
        std::this_thread::sleep_for(std::chrono::microseconds(50));
      }
    }
  }

 private:
  ncclComm_t comm_ = nullptr;
  cudaStream_t stream_ = nullptr;
  int device_ = 0;
  std::string label_;
  Event caller_reached_;
  Event stream_done_;
  std::vector<std::shared_ptr<Transfer>> unissued_;
};

class NcclRequest final : public RequestImpl {
 public:
  NcclRequest() = default;  // completed: a transfer with nobody or of nothing
  NcclRequest(std::shared_ptr<NcclState> state, std::shared_ptr<Transfer> transfer)
      : state_(std::move(state)), transfer_(std::move(transfer)) {}

  void wait() override {
    if (!transfer_) return;
    if (!transfer_->done) state_->issue_pending();
    state_->wait_for(transfer_->done->get(), transfer_->send ? "isend" : "irecv");
    transfer_.reset();
    state_.reset();
  }

  // Issues every communicator's pending transfers before waiting for any, so no transfer of the
  // batch waits behind one that was never issued.
  void wait_all(std::span<RequestImpl* const> batch) override {
    std::vector<NcclRequest*> requests;
    for (RequestImpl* request : batch) {
      requests.push_back(dynamic_cast<NcclRequest*>(request));
      MAXCTX_CHECK(requests.back() != nullptr, "wait_all over requests of different backends");
    }
    for (NcclRequest* request : requests) {
      if (request->transfer_ && !request->transfer_->done) request->state_->issue_pending();
    }
    for (NcclRequest* request : requests) request->wait();
  }

 private:
  std::shared_ptr<NcclState> state_;
  std::shared_ptr<Transfer> transfer_;
};

// make_nccl_communicator (below), for split() too: checks the axis and the GPU and makes the
// device current; no NCCL call yet.
std::shared_ptr<CommunicatorImpl> make_nccl_impl(const Communicator& axis, int device);
// The NCCL communicator over `axis` (collective over it): rank 0 makes the unique id, the axis
// broadcasts it, every rank joins.
std::shared_ptr<NcclState> make_nccl_state(const Communicator& axis, int device);

class NcclCommunicator final : public CommunicatorImpl {
 public:
  NcclCommunicator(Communicator host, int device) : host_(std::move(host)), device_(device) {
    set_label(host_.impl()->label());
  }

  int rank() const override { return host_.rank(); }
  int size() const override { return host_.size(); }

  std::shared_ptr<CommunicatorImpl> split(int color, int key) const override {
    return make_nccl_impl(host_.split(color, key), device_);
  }

  void all_gather(const void* mine, void* out, int64_t part, ElementType type,
                  const Stream& stream) const override {
    if (part == 0) return;
    state().check_device_memory(mine, part, "all_gather", "input");
    state().check_device_memory(out, part * size(), "all_gather", "output");
    run("all_gather", stream, [&] {
      state().nccl(ncclAllGather(mine, out, static_cast<size_t>(part), nccl_type(type),
                                 state().comm(), state().stream()),
                   "all_gather");
    });
  }

  void all_gather_uneven(const void* mine, void* out, int64_t total, ElementType type,
                         const Stream& stream) const override {
    if (total == 0) return;
    const int n = size();
    state().check_device_memory(mine, split_count(total, n, rank()), "all_gather_uneven", "input");
    state().check_device_memory(out, total, "all_gather_uneven", "output");
    if (total % n == 0) return all_gather(mine, out, total / n, type, stream);
    run("all_gather_uneven", stream, [&] {
      state().nccl(ncclGroupStart(), "group start (all_gather_uneven)");
      for (int owner = 0; owner < n; ++owner) {
        const int64_t count = split_count(total, n, owner);
        if (count == 0) continue;
        void* block = at(out, split_offset(total, n, owner), type);
        const void* send = owner == rank() ? mine : block;
        state().nccl(ncclBroadcast(send, block, static_cast<size_t>(count), nccl_type(type), owner,
                                   state().comm(), state().stream()),
                     "all_gather_uneven (broadcast)");
      }
      state().nccl(ncclGroupEnd(), "group end (all_gather_uneven)");
    });
  }

  // NCCL reduces in its own ring or tree: the algorithm choice is the MPI backend's.
  void reduce_scatter(const void* in, void* out, int64_t total, ElementType type,
                      ReduceScatterAlgorithm /*algorithm*/, const Stream& stream) const override {
    check_reducible("reduce_scatter", type);
    if (total == 0) return;
    const int n = size();
    state().check_device_memory(in, total, "reduce_scatter", "input");
    state().check_device_memory(out, split_count(total, n, rank()), "reduce_scatter", "output");
    if (total % n == 0) {
      run("reduce_scatter", stream, [&] {
        state().nccl(ncclReduceScatter(in, out, static_cast<size_t>(total / n), nccl_type(type),
                                       ncclSum, state().comm(), state().stream()),
                     "reduce_scatter");
      });
      return;
    }
    run("reduce_scatter", stream, [&] {
      state().nccl(ncclGroupStart(), "group start (reduce_scatter)");
      for (int owner = 0; owner < n; ++owner) {
        const int64_t count = split_count(total, n, owner);
        if (count == 0) continue;
        // The receive buffer matters on the owner only; the others pass their own block.
        state().nccl(
            ncclReduce(at(in, split_offset(total, n, owner), type), out, static_cast<size_t>(count),
                       nccl_type(type), ncclSum, owner, state().comm(), state().stream()),
            "reduce_scatter (reduce)");
      }
      state().nccl(ncclGroupEnd(), "group end (reduce_scatter)");
    });
  }

  void all_reduce(void* in_out, int64_t count, ElementType type, ReduceOp op,
                  const Stream& stream) const override {
    check_reducible("all_reduce", type);
    if (count == 0) return;
    state().check_device_memory(in_out, count, "all_reduce", "data");
    run("all_reduce", stream, [&] {
      state().nccl(ncclAllReduce(in_out, in_out, static_cast<size_t>(count), nccl_type(type),
                                 nccl_op(op), state().comm(), state().stream()),
                   "all_reduce");
    });
  }

  void all_to_all(const void* in, void* out, int64_t part, ElementType type,
                  const Stream& stream) const override {
    if (part == 0) return;
    const int n = size();
    state().check_device_memory(in, part * n, "all_to_all", "input");
    state().check_device_memory(out, part * n, "all_to_all", "output");
    run("all_to_all", stream, [&] {
      state().nccl(ncclGroupStart(), "group start (all_to_all)");
      for (int peer = 0; peer < n; ++peer) {
        send_and_receive(at(in, peer * part, type), at(out, peer * part, type), part, part, peer,
                         type);
      }
      state().nccl(ncclGroupEnd(), "group end (all_to_all)");
    });
  }

  void all_to_allv(const void* in, const int64_t* send_counts, void* out,
                   const int64_t* recv_counts, ElementType type,
                   const Stream& stream) const override {
    const int n = size();
    check_counts_agree(send_counts, recv_counts);
    int64_t sent = 0, received = 0;
    for (int p = 0; p < n; ++p) {
      sent += send_counts[p];
      received += recv_counts[p];
    }
    state().check_device_memory(in, sent, "all_to_allv", "input");
    state().check_device_memory(out, received, "all_to_allv", "output");
    if (sent == 0 && received == 0) return;
    run("all_to_allv", stream, [&] {
      state().nccl(ncclGroupStart(), "group start (all_to_allv)");
      int64_t send_begin = 0, recv_begin = 0;
      for (int peer = 0; peer < n; ++peer) {
        send_and_receive(at(in, send_begin, type), at(out, recv_begin, type), send_counts[peer],
                         recv_counts[peer], peer, type);
        send_begin += send_counts[peer];
        recv_begin += recv_counts[peer];
      }
      state().nccl(ncclGroupEnd(), "group end (all_to_allv)");
    });
  }

  void broadcast(void* data, int64_t count, ElementType type, int root,
                 const Stream& stream) const override {
    if (count == 0) return;
    state().check_device_memory(data, count, "broadcast", "data");
    run("broadcast", stream, [&] {
      state().nccl(ncclBroadcast(data, data, static_cast<size_t>(count), nccl_type(type), root,
                                 state().comm(), state().stream()),
                   "broadcast");
    });
  }

  void send_recv(const void* send, int64_t send_count, int dest, void* recv, int64_t recv_count,
                 int source, ElementType type, int /*tag*/, const Stream& stream) const override {
    const int64_t sending = dest == kNoPeer ? 0 : send_count;
    const int64_t receiving = source == kNoPeer ? 0 : recv_count;
    if (sending == 0 && receiving == 0) return;
    state().check_device_memory(send, sending, "send_recv", "send");
    state().check_device_memory(recv, receiving, "send_recv", "receive");
    run("send_recv", stream, [&] {
      state().nccl(ncclGroupStart(), "group start (send_recv)");
      if (sending > 0) {
        state().nccl(ncclSend(send, static_cast<size_t>(sending), nccl_type(type), dest,
                              state().comm(), state().stream()),
                     "send_recv (send)");
      }
      if (receiving > 0) {
        state().nccl(ncclRecv(recv, static_cast<size_t>(receiving), nccl_type(type), source,
                              state().comm(), state().stream()),
                     "send_recv (receive)");
      }
      state().nccl(ncclGroupEnd(), "group end (send_recv)");
    });
  }

  std::unique_ptr<RequestImpl> isend(const void* data, int64_t count, ElementType type, int dest,
                                     int /*tag*/, const Stream& stream) const override {
    return post(true, const_cast<void*>(data), count, type, dest, stream);
  }

  std::unique_ptr<RequestImpl> irecv(void* data, int64_t count, ElementType type, int source,
                                     int /*tag*/, const Stream& stream) const override {
    return post(false, data, count, type, source, stream);
  }

  // The ranks meet on the host (MPI). Device work is not waited for: a posted isend whose
  // receive a peer posts after the barrier must not block it.
  void barrier() const override { host_.impl()->barrier(); }

 private:
  // Blocking verbs: pending transfers first (the same NCCL order on every rank), the backend's
  // stream after the verb's, the NCCL calls, then the host waits.
  template <typename Enqueue>
  void run(const char* verb, const Stream& stream, Enqueue&& enqueue) const {
    const cudaStream_t caller = cuda_stream(stream, verb, label());
    state().issue_pending();
    state().follow(caller);
    enqueue();
    state().wait_for_stream(verb);
  }

  // Inside a group: one pair of the all-to-alls (empty sides skipped on both ends alike, since
  // the pair agrees on each count).
  void send_and_receive(const void* send, void* recv, int64_t send_count, int64_t recv_count,
                        int peer, ElementType type) const {
    if (send_count > 0) {
      state().nccl(ncclSend(send, static_cast<size_t>(send_count), nccl_type(type), peer,
                            state().comm(), state().stream()),
                   "all_to_all (send)");
    }
    if (recv_count > 0) {
      state().nccl(ncclRecv(recv, static_cast<size_t>(recv_count), nccl_type(type), peer,
                            state().comm(), state().stream()),
                   "all_to_all (receive)");
    }
  }

  // NCCL cannot tell a receive that it got fewer elements than it waits for (it hangs): the
  // counts travel first over MPI (size() int64s), and a disagreement is an error on every rank.
  void check_counts_agree(const int64_t* send_counts, const int64_t* recv_counts) const {
    const int n = size();
    std::vector<int64_t> promised(static_cast<size_t>(n));
    MPI_Alltoall(send_counts, 1, MPI_INT64_T, promised.data(), 1, MPI_INT64_T, mpi_comm(host_));
    for (int p = 0; p < n; ++p) {
      MAXCTX_CHECK(promised[p] == recv_counts[p],
                   "all_to_allv over {}: rank {} sends {} elements to rank {}, which expects {}",
                   label(), p, promised[p], rank(), recv_counts[p]);
    }
  }

  std::unique_ptr<RequestImpl> post(bool send, void* data, int64_t count, ElementType type,
                                    int peer, const Stream& stream) const {
    const cudaStream_t caller = cuda_stream(stream, send ? "isend" : "irecv", label());
    state();  // every rank that posts joins a first-use init, an empty or peerless post too
    if (peer == kNoPeer || count == 0) return std::make_unique<NcclRequest>();
    state().check_device_memory(data, count, send ? "isend" : "irecv", "data");
    auto transfer = std::make_shared<Transfer>();
    transfer->send = send;
    transfer->data = data;
    transfer->count = count;
    transfer->type = type;
    transfer->peer = peer;
    state().post(transfer, caller);
    return std::make_unique<NcclRequest>(shared_state(), std::move(transfer));
  }

  // The NCCL communicator, made by the first verb that moves data rather than here: a mesh makes
  // one communicator per combination of axes and a run uses a few (issue #32, C6), each NCCL
  // communicator holding GPU memory and a stream. ncclCommInitRank is collective over the axis;
  // it is safe in the first verb because every rank of the axis reaches that verb, in the same
  // order among this process's communicators (collectives by contract; the ring's isend/irecv,
  // the one point-to-point use, are posted by every rank of the ring in the same step). A rank
  // that never arrives leaves the others in init's WaitScope, which the watchdog reports. A
  // failed init is tried again by the next verb.
  NcclState& state() const { return *shared_state(); }
  std::shared_ptr<NcclState> shared_state() const {
    std::call_once(created_, [this] { state_ = make_nccl_state(host_, device_); });
    return state_;
  }

  Communicator host_;  // the axis's MPI communicator: bootstrap, barrier, split, count checks
  int device_ = 0;
  mutable std::once_flag created_;
  mutable std::shared_ptr<NcclState> state_;
};

std::shared_ptr<CommunicatorImpl> make_nccl_impl(const Communicator& axis, int device) {
  const CommunicatorImpl* host = axis.impl();
  MAXCTX_CHECK(host != nullptr, "make_nccl_communicator: the axis communicator is empty");
  mpi_comm(axis);  // checks that the axis is MPI-backed: the unique id travels over it
  int devices = 0;
  check_cuda(cudaGetDeviceCount(&devices), "device count");
  MAXCTX_CHECK(device >= 0 && device < devices,
               "make_nccl_communicator over {}: GPU {} asked for, this process sees {}",
               host->label(), device, devices);
  check_cuda(cudaSetDevice(device), "set device");
  return std::make_shared<NcclCommunicator>(axis, device);
}

std::shared_ptr<NcclState> make_nccl_state(const Communicator& axis, int device) {
  const CommunicatorImpl* host = axis.impl();
  const std::string label = host->label();
  check_cuda(cudaSetDevice(device), "set device");
  ncclUniqueId id{};
  if (axis.rank() == 0) check_nccl(ncclGetUniqueId(&id), "get unique id", label);
  axis.broadcast<uint8_t>({reinterpret_cast<uint8_t*>(&id), sizeof(id)}, 0);
  ncclComm_t comm = nullptr;
  {
    // Collective: it returns once every rank of the axis has joined.
    const WaitScope waiting("ncclCommInitRank", host);
    check_nccl(ncclCommInitRank(&comm, axis.size(), id, axis.rank()), "ncclCommInitRank", label);
  }
  return std::make_shared<NcclState>(comm, device, label);
}

}  // namespace

Communicator make_nccl_communicator(const Communicator& axis, int device) {
  return Communicator(make_nccl_impl(axis, device));
}

}  // namespace maxctx

#endif  // MAXCTX_HAVE_CUDA

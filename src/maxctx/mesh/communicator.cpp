// Communicator (see communicator.h): the checks every backend relies on, then one call into the
// backend with the element type erased. The messages name the verb and the values, so a failed
// check reads the same whichever backend sits below.
//
// world() and self() are the only places that name a backend: MPI launched the job, so the
// world is MPI's (mesh/mpi/mpi_communicator.h). A GPU backend is built over an MPI communicator,
// not instead of one.
#include "maxctx/mesh/communicator.h"

#include <algorithm>
#include <cstdint>
#include <typeinfo>

#include "maxctx/core/check.h"
#include "maxctx/core/tensor.h"
#include "maxctx/mesh/collective_watchdog.h"
#include "maxctx/mesh/communicator_impl.h"
#include "maxctx/mesh/mpi/mpi_communicator.h"
#include "maxctx/mesh/traffic.h"

namespace maxctx {
namespace {

// Measured by bench/collectives (2 ranks, float, 256 KiB ring segments; median of the timed
// iterations; busbw in the NCCL-tests convention), ring vs MPI_Reduce_scatter (Open MPI 4.1.4):
//   1 MiB per rank: 8.3 vs 5.5 GB/s (1.5x); 16 MiB: 3.2 vs 0.52 (6.1x); 64 MiB: 3.9 vs 0.42 (9.3x).
// Three runs gave speedups of 1.45-1.49x, 6.0-6.6x and 6.1-9.3x: the ring is the default.
ReduceScatterAlgorithm g_default_reduce_scatter = ReduceScatterAlgorithm::kRing;

// User tags stay below this; backends keep the tags from here up for their collectives' own
// messages, so a pending user irecv can never match one.
constexpr int kMaxUserTag = 32000;

bool overlaps(const void* a, size_t a_bytes, const void* b, size_t b_bytes) {
  if (a_bytes == 0 || b_bytes == 0) return false;
  const auto a_begin = reinterpret_cast<uintptr_t>(a);
  const auto b_begin = reinterpret_cast<uintptr_t>(b);
  return a_begin < b_begin + b_bytes && b_begin < a_begin + a_bytes;
}

void check_user_tag(int tag) {
  MAXCTX_CHECK(tag >= 0 && tag < kMaxUserTag, "tag {}: point-to-point tags are 0..{}", tag,
               kMaxUserTag - 1);
}

void check_peer(int peer, int size, const char* role) {
  MAXCTX_CHECK(peer == kNoPeer || (peer >= 0 && peer < size),
               "{} rank {}: allowed 0..{} or kNoPeer", role, peer, size - 1);
}

// The span type a tensor view's elements travel as: f32 as float, bf16 and int8 as their bits.
template <typename F>
void visit_view_type(const TensorView& view, F&& f) {
  switch (view.dtype()) {
    case DType::kF32:
      return f.template operator()<float>();
    case DType::kBF16:
      return f.template operator()<uint16_t>();
    case DType::kI8:
      return f.template operator()<int8_t>();
  }
  MAXCTX_CHECK(false, "unknown dtype {}", static_cast<int>(view.dtype()));
}

template <typename T>
std::span<T> elements(const TensorView& view) {
  return {static_cast<T*>(view.raw()), static_cast<size_t>(view.numel())};
}

void check_same_dtype(const char* verb, const TensorView& a, const TensorView& b) {
  MAXCTX_CHECK(a.dtype() == b.dtype(), "{}: tensors hold {} and {}; both must hold the same dtype",
               verb, dtype_name(a.dtype()), dtype_name(b.dtype()));
}

void check_reducible(const char* verb, const TensorView& view) {
  MAXCTX_CHECK(view.dtype() == DType::kF32,
               "{}: tensor holds {}; reductions take f32 (reduce {} "
               "as f32)",
               verb, dtype_name(view.dtype()), dtype_name(view.dtype()));
}

}  // namespace

std::string_view algorithm_name(ReduceScatterAlgorithm algorithm) {
  return algorithm == ReduceScatterAlgorithm::kRing ? "ring" : "mpi";
}

void set_default_reduce_scatter_algorithm(ReduceScatterAlgorithm algorithm) {
  g_default_reduce_scatter = algorithm;
}

ReduceScatterAlgorithm default_reduce_scatter_algorithm() { return g_default_reduce_scatter; }

// --- Request ---------------------------------------------------------------------------------

Request::Request() = default;
Request::Request(std::unique_ptr<RequestImpl> impl) : impl_(std::move(impl)) {}
Request::Request(Request&& other) noexcept
    : impl_(std::move(other.impl_)), transfer_(other.transfer_) {
  other.transfer_.begin_ns = 0;
}

Request& Request::operator=(Request&& other) noexcept {
  if (this != &other) {
    wait();
    impl_ = std::move(other.impl_);
    transfer_ = other.transfer_;
    other.transfer_.begin_ns = 0;
  }
  return *this;
}

Request::~Request() { wait(); }

void Request::trace_transfer(const char* name, const char* axis, int64_t bytes) {
  if (!trace::enabled() || !impl_) return;
  transfer_ = {name, axis, bytes, trace::now_ns(), 0, trace::Category::kComm, trace::kAsyncTrack};
}

void Request::finish_trace() {
  if (transfer_.begin_ns == 0) return;
  transfer_.end_ns = trace::now_ns();
  if (trace::enabled()) trace::record(transfer_);
  transfer_.begin_ns = 0;
}

void Request::wait() {
  if (!impl_) return;
  const WaitScope waiting("wait (isend/irecv)", nullptr);
  const trace::Span span("wait", trace::Category::kComm);
  impl_->wait();
  impl_.reset();
  finish_trace();
}

void wait_all(std::span<Request> requests) {
  // One batch per backend (host and device transfers of one step may be waited together); every
  // transfer was started when its request was made, so waiting batch after batch cannot stall.
  std::vector<std::vector<RequestImpl*>> batches;
  for (const Request& request : requests) {
    if (!request.impl_) continue;
    RequestImpl* impl = request.impl_.get();
    auto same_backend = [&](const std::vector<RequestImpl*>& b) {
      return typeid(*b.front()) == typeid(*impl);
    };
    const auto batch = std::find_if(batches.begin(), batches.end(), same_backend);
    if (batch == batches.end()) {
      batches.push_back({impl});
    } else {
      batch->push_back(impl);
    }
  }
  if (batches.empty()) return;
  {
    const WaitScope waiting("wait_all (isend/irecv)", nullptr);
    const trace::Span span("wait", trace::Category::kComm);
    for (const std::vector<RequestImpl*>& batch : batches) batch.front()->wait_all(batch);
  }
  for (Request& request : requests) {
    request.impl_.reset();
    request.finish_trace();
  }
}

// --- Communicator: lifetime --------------------------------------------------------------------

Communicator::Communicator() = default;
Communicator::Communicator(std::shared_ptr<CommunicatorImpl> impl) : impl_(std::move(impl)) {}
Communicator::~Communicator() = default;

Communicator Communicator::world() { return mpi_world(); }
Communicator Communicator::self() {
  Communicator alone = mpi_self();
  alone.trace_name_ = "self";
  return alone;
}

int Communicator::rank() const { return impl_ ? impl_->rank() : 0; }
int Communicator::size() const { return impl_ ? impl_->size() : 1; }

const CommunicatorImpl& Communicator::backend() const {
  MAXCTX_CHECK(impl_ != nullptr,
               "a verb on an empty Communicator (default-constructed or moved "
               "from); use world(), self(), split() or a Mesh group");
  return *impl_;
}

Communicator Communicator::split(int color, int key) const {
  Communicator part(backend().split(color, key));
  part.trace_name_ = "split";
  part.stream_ = stream_;  // a part of a communicator on a stream runs on it too
  return part;
}

void Communicator::barrier() const {
  const WaitScope waiting("barrier", &backend());
  const trace::Span span("barrier", trace::Category::kComm, trace_name_);
  backend().barrier();
}

// --- Communicator: point to point --------------------------------------------------------------

template <typename T>
void Communicator::send_recv(std::span<const T> send, int dest, std::span<T> recv, int source,
                             int tag) const {
  const trace::Span span("send_recv", trace::Category::kComm, trace_name_,
                         static_cast<int64_t>(send.size_bytes() + recv.size_bytes()));
  const CommunicatorImpl& impl = backend();
  check_user_tag(tag);
  check_peer(dest, impl.size(), "send_recv: dest");
  check_peer(source, impl.size(), "send_recv: source");
  count_traffic(trace_name_, impl.size(), CollectiveKind::kSendRecv,
                static_cast<int64_t>(send.size_bytes() + recv.size_bytes()));
  const WaitScope waiting("send_recv", &impl);
  impl.send_recv(send.data(), static_cast<int64_t>(send.size()), dest, recv.data(),
                 static_cast<int64_t>(recv.size()), source, element_type_of<T>(), tag, stream_);
}

template <typename T>
Request Communicator::isend(std::span<const T> data, int dest, int tag) const {
  const CommunicatorImpl& impl = backend();
  check_user_tag(tag);
  check_peer(dest, impl.size(), "isend: dest");
  Request request(impl.isend(data.data(), static_cast<int64_t>(data.size()), element_type_of<T>(),
                             dest, tag, stream_));
  request.trace_transfer("isend", trace_name_, static_cast<int64_t>(data.size_bytes()));
  count_traffic(trace_name_, impl.size(), CollectiveKind::kIsend,
                static_cast<int64_t>(data.size_bytes()));
  return request;
}

template <typename T>
Request Communicator::irecv(std::span<T> data, int source, int tag) const {
  const CommunicatorImpl& impl = backend();
  check_user_tag(tag);
  check_peer(source, impl.size(), "irecv: source");
  Request request(impl.irecv(data.data(), static_cast<int64_t>(data.size()), element_type_of<T>(),
                             source, tag, stream_));
  request.trace_transfer("irecv", trace_name_, static_cast<int64_t>(data.size_bytes()));
  count_traffic(trace_name_, impl.size(), CollectiveKind::kIrecv,
                static_cast<int64_t>(data.size_bytes()));
  return request;
}

// --- Communicator: collectives -----------------------------------------------------------------

template <typename T>
void Communicator::all_gather(std::span<const T> mine, std::span<T> out) const {
  const trace::Span span("all_gather", trace::Category::kComm, trace_name_,
                         static_cast<int64_t>(out.size_bytes()));
  const CommunicatorImpl& impl = backend();
  const int64_t n = static_cast<int64_t>(mine.size());
  MAXCTX_CHECK_EQ(static_cast<int64_t>(out.size()), n * impl.size(),
                  "all_gather: out must hold size() = {} parts of {} elements", impl.size(), n);
  count_traffic(trace_name_, impl.size(), CollectiveKind::kAllGather,
                static_cast<int64_t>(out.size_bytes()));
  const WaitScope waiting("all_gather", &impl);
  impl.all_gather(mine.data(), out.data(), n, element_type_of<T>(), stream_);
}

template <typename T>
void Communicator::all_gather_uneven(std::span<const T> mine, std::span<T> out) const {
  const trace::Span span("all_gather", trace::Category::kComm, trace_name_,
                         static_cast<int64_t>(out.size_bytes()));
  const CommunicatorImpl& impl = backend();
  const int64_t total = static_cast<int64_t>(out.size());
  MAXCTX_CHECK_EQ(static_cast<int64_t>(mine.size()), split_count(total, impl.size(), impl.rank()),
                  "all_gather_uneven: rank {} of {} holds this block of {} elements", impl.rank(),
                  impl.size(), total);
  count_traffic(trace_name_, impl.size(), CollectiveKind::kAllGather,
                static_cast<int64_t>(out.size_bytes()));
  const WaitScope waiting("all_gather_uneven", &impl);
  impl.all_gather_uneven(mine.data(), out.data(), total, element_type_of<T>(), stream_);
}

template <typename T>
void Communicator::reduce_scatter(std::span<const T> in, std::span<T> out) const {
  reduce_scatter(in, out, g_default_reduce_scatter);
}

template <typename T>
void Communicator::reduce_scatter(std::span<const T> in, std::span<T> out,
                                  ReduceScatterAlgorithm algorithm) const {
  const trace::Span span("reduce_scatter", trace::Category::kComm, trace_name_,
                         static_cast<int64_t>(in.size_bytes()));
  const CommunicatorImpl& impl = backend();
  const int64_t total = static_cast<int64_t>(in.size());
  MAXCTX_CHECK_EQ(static_cast<int64_t>(out.size()), split_count(total, impl.size(), impl.rank()),
                  "reduce_scatter: out is rank {}'s block of {} elements over {} ranks",
                  impl.rank(), total, impl.size());
  MAXCTX_CHECK(!overlaps(in.data(), in.size_bytes(), out.data(), out.size_bytes()),
               "reduce_scatter: out overlaps in; reduce into a separate buffer");
  count_traffic(trace_name_, impl.size(), CollectiveKind::kReduceScatter,
                static_cast<int64_t>(in.size_bytes()));
  const WaitScope waiting("reduce_scatter", &impl);
  impl.reduce_scatter(in.data(), out.data(), total, element_type_of<T>(), algorithm, stream_);
}

template <typename T>
void Communicator::all_reduce(std::span<T> in_out, ReduceOp op) const {
  const WaitScope waiting("all_reduce", &backend());
  const trace::Span span("all_reduce", trace::Category::kComm, trace_name_,
                         static_cast<int64_t>(in_out.size_bytes()));
  count_traffic(trace_name_, backend().size(), CollectiveKind::kAllReduce,
                static_cast<int64_t>(in_out.size_bytes()));
  backend().all_reduce(in_out.data(), static_cast<int64_t>(in_out.size()), element_type_of<T>(), op,
                       stream_);
}

template <typename T>
void Communicator::all_to_all(std::span<const T> in, std::span<T> out) const {
  const trace::Span span("all_to_all", trace::Category::kComm, trace_name_,
                         static_cast<int64_t>(in.size_bytes()));
  const CommunicatorImpl& impl = backend();
  const int64_t total = static_cast<int64_t>(in.size());
  MAXCTX_CHECK(total % impl.size() == 0,
               "all_to_all: in holds {} elements, not size() = {} equal blocks", total,
               impl.size());
  MAXCTX_CHECK_EQ(static_cast<int64_t>(out.size()), total,
                  "all_to_all: out holds as many elements as in");
  MAXCTX_CHECK(!overlaps(in.data(), in.size_bytes(), out.data(), out.size_bytes()),
               "all_to_all: out overlaps in; exchange into a separate buffer");
  count_traffic(trace_name_, impl.size(), CollectiveKind::kAllToAll,
                static_cast<int64_t>(in.size_bytes()));
  const WaitScope waiting("all_to_all", &impl);
  impl.all_to_all(in.data(), out.data(), total / impl.size(), element_type_of<T>(), stream_);
}

template <typename T>
void Communicator::all_to_allv(std::span<const T> in, std::span<const int64_t> send_counts,
                               std::span<T> out, std::span<const int64_t> recv_counts) const {
  const trace::Span span("all_to_allv", trace::Category::kComm, trace_name_,
                         static_cast<int64_t>(in.size_bytes()));
  const CommunicatorImpl& impl = backend();
  const auto n = static_cast<size_t>(impl.size());
  MAXCTX_CHECK(send_counts.size() == n && recv_counts.size() == n,
               "all_to_allv: {} send and {} receive counts for {} ranks", send_counts.size(),
               recv_counts.size(), n);
  int64_t sent = 0, received = 0;
  for (size_t p = 0; p < n; ++p) {
    MAXCTX_CHECK(send_counts[p] >= 0 && recv_counts[p] >= 0,
                 "all_to_allv: negative count for rank {}", p);
    sent += send_counts[p];
    received += recv_counts[p];
  }
  MAXCTX_CHECK(
      sent == static_cast<int64_t>(in.size()) && received == static_cast<int64_t>(out.size()),
      "all_to_allv: counts sum to {} sent / {} received, buffers hold {} / {}", sent, received,
      in.size(), out.size());
  MAXCTX_CHECK(!overlaps(in.data(), in.size_bytes(), out.data(), out.size_bytes()),
               "all_to_allv: out overlaps in; exchange into a separate buffer");
  count_traffic(trace_name_, impl.size(), CollectiveKind::kAllToAll,
                static_cast<int64_t>(in.size_bytes()));
  const WaitScope waiting("all_to_allv", &impl);
  impl.all_to_allv(in.data(), send_counts.data(), out.data(), recv_counts.data(),
                   element_type_of<T>(), stream_);
}

template <typename T>
void Communicator::broadcast(std::span<T> data, int root) const {
  const trace::Span span("broadcast", trace::Category::kComm, trace_name_,
                         static_cast<int64_t>(data.size_bytes()));
  const CommunicatorImpl& impl = backend();
  MAXCTX_CHECK(root >= 0 && root < impl.size(), "broadcast root {} of {} ranks", root, impl.size());
  count_traffic(trace_name_, impl.size(), CollectiveKind::kBroadcast,
                static_cast<int64_t>(data.size_bytes()));
  const WaitScope waiting("broadcast", &impl);
  impl.broadcast(data.data(), static_cast<int64_t>(data.size()), element_type_of<T>(), root,
                 stream_);
}

#define MAXCTX_INSTANTIATE_VERBS(T)                                                                \
  template void Communicator::all_gather<T>(std::span<const T>, std::span<T>) const;               \
  template void Communicator::all_gather_uneven<T>(std::span<const T>, std::span<T>) const;        \
  template void Communicator::reduce_scatter<T>(std::span<const T>, std::span<T>) const;           \
  template void Communicator::reduce_scatter<T>(std::span<const T>, std::span<T>,                  \
                                                ReduceScatterAlgorithm) const;                     \
  template void Communicator::all_reduce<T>(std::span<T>, ReduceOp) const;                         \
  template void Communicator::all_to_all<T>(std::span<const T>, std::span<T>) const;               \
  template void Communicator::all_to_allv<T>(std::span<const T>, std::span<const int64_t>,         \
                                             std::span<T>, std::span<const int64_t>) const;        \
  template void Communicator::broadcast<T>(std::span<T>, int) const;                               \
  template void Communicator::send_recv<T>(std::span<const T>, int, std::span<T>, int, int) const; \
  template Request Communicator::isend<T>(std::span<const T>, int, int) const;                     \
  template Request Communicator::irecv<T>(std::span<T>, int, int) const;

MAXCTX_INSTANTIATE_VERBS(float)
MAXCTX_INSTANTIATE_VERBS(double)
MAXCTX_INSTANTIATE_VERBS(int32_t)
MAXCTX_INSTANTIATE_VERBS(int64_t)
MAXCTX_INSTANTIATE_VERBS(uint16_t)
MAXCTX_INSTANTIATE_VERBS(int8_t)
MAXCTX_INSTANTIATE_VERBS(uint8_t)

#undef MAXCTX_INSTANTIATE_VERBS

// --- Communicator: tensor views ----------------------------------------------------------------

Communicator Communicator::for_memory_of(const TensorView& view, const Stream& stream) const {
  if (view.device() == Device::kCpu) return *this;
  MAXCTX_CHECK(device_impl_ != nullptr,
               "communicator '{}' moves host memory only, and was given a {} tensor (the mesh "
               "sets up device collectives for hardware=gpu)",
               backend().label(), device_name(view.device()));
  Communicator device(device_impl_);
  device.trace_name_ = trace_name_;
  return device.on(stream);
}

Communicator Communicator::for_memory_of(const TensorView& a, const TensorView& b, const char* verb,
                                         const Stream& stream) const {
  MAXCTX_CHECK(a.device() == b.device(), "{}: one tensor is on {}, the other on {}", verb,
               device_name(a.device()), device_name(b.device()));
  return for_memory_of(a, stream);
}

void Communicator::all_gather(const TensorView& mine, const TensorView& out,
                              const Stream& stream) const {
  check_same_dtype("all_gather", mine, out);
  const Communicator c = for_memory_of(mine, out, "all_gather", stream);
  visit_view_type(mine,
                  [&]<typename T>() { c.all_gather<T>(elements<T>(mine), elements<T>(out)); });
}

void Communicator::all_gather_uneven(const TensorView& mine, const TensorView& out,
                                     const Stream& stream) const {
  check_same_dtype("all_gather_uneven", mine, out);
  const Communicator c = for_memory_of(mine, out, "all_gather_uneven", stream);
  visit_view_type(
      mine, [&]<typename T>() { c.all_gather_uneven<T>(elements<T>(mine), elements<T>(out)); });
}

void Communicator::reduce_scatter(const TensorView& in, const TensorView& out,
                                  const Stream& stream) const {
  check_same_dtype("reduce_scatter", in, out);
  check_reducible("reduce_scatter", in);
  for_memory_of(in, out, "reduce_scatter", stream)
      .reduce_scatter<float>(elements<float>(in), elements<float>(out));
}

void Communicator::all_reduce(const TensorView& in_out, ReduceOp op, const Stream& stream) const {
  check_reducible("all_reduce", in_out);
  for_memory_of(in_out, stream).all_reduce<float>(elements<float>(in_out), op);
}

void Communicator::all_to_all(const TensorView& in, const TensorView& out,
                              const Stream& stream) const {
  check_same_dtype("all_to_all", in, out);
  const Communicator c = for_memory_of(in, out, "all_to_all", stream);
  visit_view_type(in, [&]<typename T>() { c.all_to_all<T>(elements<T>(in), elements<T>(out)); });
}

void Communicator::all_to_allv(const TensorView& in, std::span<const int64_t> send_counts,
                               const TensorView& out, std::span<const int64_t> recv_counts,
                               const Stream& stream) const {
  check_same_dtype("all_to_allv", in, out);
  const Communicator c = for_memory_of(in, out, "all_to_allv", stream);
  visit_view_type(in, [&]<typename T>() {
    c.all_to_allv<T>(elements<T>(in), send_counts, elements<T>(out), recv_counts);
  });
}

void Communicator::send_recv(const TensorView& send, int dest, const TensorView& recv, int source,
                             int tag, const Stream& stream) const {
  check_same_dtype("send_recv", send, recv);
  // An empty side (kNoPeer) carries no device; the other decides.
  const Communicator c =
      for_memory_of(send.empty() ? recv : send, recv.empty() ? send : recv, "send_recv", stream);
  visit_view_type(send, [&]<typename T>() {
    c.send_recv<T>(elements<T>(send), dest, elements<T>(recv), source, tag);
  });
}

Request Communicator::isend(const TensorView& data, int dest, int tag, const Stream& stream) const {
  Request request;
  const Communicator c = for_memory_of(data, stream);
  visit_view_type(data, [&]<typename T>() {
    request = c.isend<T>(std::span<const T>(elements<T>(data)), dest, tag);
  });
  return request;
}

Request Communicator::irecv(const TensorView& data, int source, int tag,
                            const Stream& stream) const {
  Request request;
  const Communicator c = for_memory_of(data, stream);
  visit_view_type(data,
                  [&]<typename T>() { request = c.irecv<T>(elements<T>(data), source, tag); });
  return request;
}

}  // namespace maxctx

// The MPI backend's verbs (see mpi_communicator.h). Two kinds of path:
//  - one MPI collective call when every count fits max_elements_per_call();
//  - a ring of chunked MPI_Sendrecv otherwise (all-gathers), per-owner MPI_Reduce chunks
//    (MPI reduce-scatter), pairwise chunked exchanges (all-to-all), or slices of the same call
//    (all-reduce, broadcast).
// The ring reduce-scatter is always a ring: it cuts the blocks into cache-sized segments and
// reduces each segment around the whole ring before the next, so the add reads data the receive
// has just brought into cache and the scratch space is two segments, not two blocks. That add runs
// on the CPU, which is why it lives here: this backend's buffers are host memory. A GPU backend
// reduces on the device (NCCL does its own).
#include "maxctx/mesh/mpi/mpi_communicator.h"

#include <algorithm>
#include <climits>
#include <cstdint>
#include <type_traits>

#include "maxctx/core/buffer.h"
#include "maxctx/core/check.h"

namespace maxctx {
namespace {

int64_t g_max_elements_per_call = INT_MAX;

// A ring segment: small enough that the received part is still in L2 (1 MiB per core here) when
// it is added, large enough that the per-message cost (a few microseconds) stays under 5%.
constexpr size_t kRingSegmentBytes = size_t{256} << 10;

// Communicator keeps user tags below 32000; the rings of the collectives use kCollectiveTag, so a
// pending user irecv can never match a collective's message. 32767 is the smallest MPI_TAG_UB
// MPI allows.
constexpr int kCollectiveTag = 32001;

template <typename T>
MPI_Datatype mpi_type() {
  if constexpr (std::is_same_v<T, float>) {
    return MPI_FLOAT;
  } else if constexpr (std::is_same_v<T, double>) {
    return MPI_DOUBLE;
  } else if constexpr (std::is_same_v<T, int32_t>) {
    return MPI_INT32_T;
  } else if constexpr (std::is_same_v<T, int64_t>) {
    return MPI_INT64_T;
  } else if constexpr (std::is_same_v<T, uint16_t>) {
    return MPI_UINT16_T;
  } else if constexpr (std::is_same_v<T, int8_t>) {
    return MPI_INT8_T;
  } else {
    static_assert(std::is_same_v<T, uint8_t>, "no MPI datatype for this element type");
    return MPI_UINT8_T;
  }
}

MPI_Op mpi_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
      return MPI_SUM;
    case ReduceOp::kMax:
      return MPI_MAX;
    case ReduceOp::kMin:
      return MPI_MIN;
  }
  MAXCTX_CHECK(false, "unknown ReduceOp {}", static_cast<int>(op));
}

int mpi_peer(int peer) { return peer == kNoPeer ? MPI_PROC_NULL : peer; }

template <typename T>
std::span<T> typed(void* data, int64_t count) {
  return {static_cast<T*>(data), static_cast<size_t>(count)};
}

template <typename T>
std::span<const T> typed(const void* data, int64_t count) {
  return {static_cast<const T*>(data), static_cast<size_t>(count)};
}

// Every count handed to MPI passes through here: the chunking above must already have made it fit.
int as_count(int64_t n) {
  MAXCTX_CHECK(n >= 0 && n <= INT_MAX, "an MPI count of {} elements: chunking missed it", n);
  return static_cast<int>(n);
}

// A point-to-point transfer of n elements is this many messages (at least one, even when empty,
// so that both sides always agree on the number of messages).
int64_t num_messages(int64_t n, int64_t limit) { return n == 0 ? 1 : (n + limit - 1) / limit; }

// Scratch for the ring reduce-scatter's intermediate steps (ranks > 2). One per process: only the
// main thread calls MPI (MPI_THREAD_FUNNELED) and no verb is re-entered.
std::byte* ring_scratch(size_t bytes) {
  static AlignedBuffer scratch;
  if (scratch.size() < bytes) scratch = AlignedBuffer(bytes);
  return scratch.data();
}

// The ring reduce-scatter's add, on the CPU: this backend's buffers are host memory.
template <typename T>
void add_into(T* __restrict acc, const T* __restrict in, int64_t n) {
  for (int64_t i = 0; i < n; ++i) acc[i] = static_cast<T>(acc[i] + in[i]);
}

void check_received(const MPI_Status& status, MPI_Datatype type, int64_t expected) {
  if (expected < 0) return;
  int received = 0;
  MPI_Get_count(&status, type, &received);
  MAXCTX_CHECK_EQ(received, expected,
                  "a message was shorter than its receive buffer: the sender and the receiver "
                  "disagree on the size");
}

}  // namespace

void set_max_elements_per_call(int64_t max_elements) {
  MAXCTX_CHECK(max_elements >= 1 && max_elements <= INT_MAX,
               "max elements per MPI call is {}: allowed 1..{}", max_elements, INT_MAX);
  g_max_elements_per_call = max_elements;
}

int64_t max_elements_per_call() { return g_max_elements_per_call; }

Communicator mpi_world() {
  auto impl = std::make_shared<MpiCommunicator>(MPI_COMM_WORLD, false);
  impl->set_label("world");
  return Communicator(std::move(impl));
}

Communicator mpi_self() {
  auto impl = std::make_shared<MpiCommunicator>(MPI_COMM_SELF, false);
  impl->set_label("self");
  return Communicator(std::move(impl));
}

Communicator adopt_mpi_comm(MPI_Comm comm) {
  MAXCTX_CHECK(comm != MPI_COMM_NULL, "adopting MPI_COMM_NULL");
  return Communicator(std::make_shared<MpiCommunicator>(comm, true));
}

MPI_Comm mpi_comm(const Communicator& comm) {
  const auto* mpi = dynamic_cast<const MpiCommunicator*>(comm.impl());
  MAXCTX_CHECK(mpi != nullptr,
               "this communicator is not MPI-backed (or empty); the MPI bootstrap "
               "needs one from mpi_world() or its splits");
  return mpi->comm();
}

// --- MpiRequest --------------------------------------------------------------------------------

void MpiRequest::wait() {
  if (requests_.empty()) return;
  std::vector<MPI_Status> statuses(requests_.size());
  MPI_Waitall(static_cast<int>(requests_.size()), requests_.data(), statuses.data());
  for (size_t i = 0; i < statuses.size(); ++i) check_received(statuses[i], type_, expected_[i]);
  requests_.clear();
  expected_.clear();
}

void MpiRequest::wait_all(std::span<RequestImpl* const> batch) {
  std::vector<MpiRequest*> requests;
  for (RequestImpl* request : batch) {
    requests.push_back(dynamic_cast<MpiRequest*>(request));
    MAXCTX_CHECK(requests.back() != nullptr, "wait_all over requests of different backends");
  }
  wait_together(requests);
}

void MpiRequest::wait_together(std::span<MpiRequest* const> requests) {
  std::vector<MPI_Request> all;
  for (const MpiRequest* request : requests) {
    all.insert(all.end(), request->requests_.begin(), request->requests_.end());
  }
  std::vector<MPI_Status> statuses(all.size());
  MPI_Waitall(static_cast<int>(all.size()), all.data(), statuses.data());
  size_t next = 0;
  for (MpiRequest* request : requests) {
    for (int64_t expected : request->expected_) {
      check_received(statuses[next++], request->type_, expected);
    }
    request->requests_.clear();
    request->expected_.clear();
  }
}

// --- MpiCommunicator: lifetime -----------------------------------------------------------------

MpiCommunicator::MpiCommunicator(MPI_Comm comm, bool owned) : comm_(comm), owned_(owned) {
  MPI_Comm_rank(comm_, &rank_);
  MPI_Comm_size(comm_, &size_);
}

MpiCommunicator::~MpiCommunicator() {
  if (!owned_ || comm_ == MPI_COMM_NULL) return;
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized) MPI_Comm_free(&comm_);
}

std::shared_ptr<CommunicatorImpl> MpiCommunicator::split(int color, int key) const {
  MPI_Comm comm = MPI_COMM_NULL;
  MPI_Comm_split(comm_, color, key, &comm);
  MAXCTX_CHECK(comm != MPI_COMM_NULL, "adopting MPI_COMM_NULL");
  return std::make_shared<MpiCommunicator>(comm, true);
}

void MpiCommunicator::barrier() const { MPI_Barrier(comm_); }

// --- MpiCommunicator: point to point -----------------------------------------------------------

// Defined before the verbs below use them: clang 14 does not instantiate a member template
// that a template lambda names before its definition (an undefined symbol at link time).
template <typename T>
std::unique_ptr<MpiRequest> MpiCommunicator::post_send(std::span<const T> data, int dest,
                                                       int tag) const {
  const int64_t limit = g_max_elements_per_call;
  const int64_t n = static_cast<int64_t>(data.size());
  const int64_t messages = num_messages(n, limit);
  auto request = std::make_unique<MpiRequest>();
  request->type_ = mpi_type<T>();
  request->requests_.resize(messages);
  request->expected_.assign(messages, -1);
  for (int64_t m = 0; m < messages; ++m) {
    const int64_t begin = m * limit;
    const int64_t count = std::min(limit, n - begin);
    MPI_Isend(data.data() + begin, as_count(count), request->type_, dest, tag, comm_,
              &request->requests_[m]);
  }
  return request;
}

template <typename T>
std::unique_ptr<MpiRequest> MpiCommunicator::post_recv(std::span<T> data, int source,
                                                       int tag) const {
  const int64_t limit = g_max_elements_per_call;
  const int64_t n = static_cast<int64_t>(data.size());
  const int64_t messages = num_messages(n, limit);
  auto request = std::make_unique<MpiRequest>();
  request->type_ = mpi_type<T>();
  request->requests_.resize(messages);
  request->expected_.resize(messages);
  for (int64_t m = 0; m < messages; ++m) {
    const int64_t begin = m * limit;
    const int64_t count = std::min(limit, n - begin);
    request->expected_[m] = source == MPI_PROC_NULL ? -1 : count;
    MPI_Irecv(data.data() + begin, as_count(count), request->type_, source, tag, comm_,
              &request->requests_[m]);
  }
  return request;
}

template <typename T>
void MpiCommunicator::exchange(std::span<const T> send, int dest, std::span<T> recv, int source,
                               int tag) const {
  const int64_t limit = g_max_elements_per_call;
  if (static_cast<int64_t>(send.size()) <= limit && static_cast<int64_t>(recv.size()) <= limit) {
    MPI_Status status;
    MPI_Sendrecv(send.data(), as_count(send.size()), mpi_type<T>(), dest, tag, recv.data(),
                 as_count(recv.size()), mpi_type<T>(), source, tag, comm_, &status);
    if (source != MPI_PROC_NULL) {
      check_received(status, mpi_type<T>(), static_cast<int64_t>(recv.size()));
    }
    return;
  }
  const std::unique_ptr<MpiRequest> receive = post_recv(recv, source, tag);
  const std::unique_ptr<MpiRequest> sent = post_send(send, dest, tag);
  MpiRequest* const both[2] = {receive.get(), sent.get()};
  MpiRequest::wait_together(both);
}

void MpiCommunicator::send_recv(const void* send, int64_t send_count, int dest, void* recv,
                                int64_t recv_count, int source, ElementType type, int tag,
                                const Stream& /*stream*/) const {
  visit_element_type(type, [&]<typename T>() {
    exchange<T>(typed<T>(send, send_count), mpi_peer(dest), typed<T>(recv, recv_count),
                mpi_peer(source), tag);
  });
}

std::unique_ptr<RequestImpl> MpiCommunicator::isend(const void* data, int64_t count,
                                                    ElementType type, int dest, int tag,
                                                    const Stream& /*stream*/) const {
  return visit_element_type(type, [&]<typename T>() -> std::unique_ptr<RequestImpl> {
    return post_send<T>(typed<T>(data, count), mpi_peer(dest), tag);
  });
}

std::unique_ptr<RequestImpl> MpiCommunicator::irecv(void* data, int64_t count, ElementType type,
                                                    int source, int tag,
                                                    const Stream& /*stream*/) const {
  return visit_element_type(type, [&]<typename T>() -> std::unique_ptr<RequestImpl> {
    return post_recv<T>(typed<T>(data, count), mpi_peer(source), tag);
  });
}

// --- MpiCommunicator: collectives --------------------------------------------------------------

void MpiCommunicator::all_gather(const void* mine, void* out, int64_t part, ElementType type,
                                 const Stream& /*stream*/) const {
  visit_element_type(type, [&]<typename T>() {
    all_gather_typed<T>(typed<T>(mine, part), typed<T>(out, part * size_));
  });
}

template <typename T>
void MpiCommunicator::all_gather_typed(std::span<const T> mine, std::span<T> out) const {
  const int64_t n = static_cast<int64_t>(mine.size());
  if (n == 0) return;
  if (n > g_max_elements_per_call) return ring_all_gather(mine, out, false);
  const bool in_place = mine.data() == out.data() + rank_ * n;
  MPI_Allgather(in_place ? MPI_IN_PLACE : mine.data(), as_count(n), mpi_type<T>(), out.data(),
                as_count(n), mpi_type<T>(), comm_);
}

void MpiCommunicator::all_gather_uneven(const void* mine, void* out, int64_t total,
                                        ElementType type, const Stream& /*stream*/) const {
  visit_element_type(type, [&]<typename T>() {
    all_gather_uneven_typed<T>(typed<T>(mine, split_count(total, size_, rank_)),
                               typed<T>(out, total));
  });
}

template <typename T>
void MpiCommunicator::all_gather_uneven_typed(std::span<const T> mine, std::span<T> out) const {
  const int64_t total = static_cast<int64_t>(out.size());
  const int64_t my_offset = split_offset(total, size_, rank_);
  if (total == 0) return;
  if (total > g_max_elements_per_call) return ring_all_gather(mine, out, true);
  std::vector<int> counts(size_);
  std::vector<int> offsets(size_);
  for (int p = 0; p < size_; ++p) {
    counts[p] = as_count(split_count(total, size_, p));
    offsets[p] = as_count(split_offset(total, size_, p));
  }
  const bool in_place = !mine.empty() && mine.data() == out.data() + my_offset;
  MPI_Allgatherv(in_place ? MPI_IN_PLACE : mine.data(), as_count(mine.size()), mpi_type<T>(),
                 out.data(), counts.data(), offsets.data(), mpi_type<T>(), comm_);
}

// Step s: pass block (rank - s) to the right, receive block (rank - s - 1) from the left.
template <typename T>
void MpiCommunicator::ring_all_gather(std::span<const T> mine, std::span<T> out,
                                      bool uneven) const {
  const int n = size_;
  const int64_t total = static_cast<int64_t>(out.size());
  const int64_t part = static_cast<int64_t>(mine.size());
  auto block = [&](int b) {
    return uneven ? out.subspan(split_offset(total, n, b), split_count(total, n, b))
                  : out.subspan(b * part, part);
  };
  std::span<T> my_block = block(rank_);
  if (mine.data() != my_block.data()) std::copy(mine.begin(), mine.end(), my_block.begin());
  const int right = (rank_ + 1) % n;
  const int left = (rank_ + n - 1) % n;
  for (int s = 0; s + 1 < n; ++s) {
    std::span<T> send = block((rank_ - s + n) % n);
    std::span<T> recv = block((rank_ - s - 1 + 2 * n) % n);
    exchange<T>(send, right, recv, left, kCollectiveTag);
  }
}

void MpiCommunicator::reduce_scatter(const void* in, void* out, int64_t total, ElementType type,
                                     ReduceScatterAlgorithm algorithm,
                                     const Stream& /*stream*/) const {
  if (total == 0) return;
  visit_element_type(type, [&]<typename T>() {
    const std::span<const T> in_elements = typed<T>(in, total);
    const std::span<T> out_elements = typed<T>(out, split_count(total, size_, rank_));
    if (size_ == 1) {
      std::copy(in_elements.begin(), in_elements.end(), out_elements.begin());
    } else if (algorithm == ReduceScatterAlgorithm::kRing) {
      ring_reduce_scatter(in_elements, out_elements);
    } else {
      mpi_reduce_scatter(in_elements, out_elements);
    }
  });
}

// Segment by segment (the same element range of every block), n-1 steps: at step s rank r sends
// its running sum of block (r - s - 1) to the right and receives the left neighbour's running sum
// of block (r - s - 2), adding its own part. After the last step it holds the full sum of block r.
template <typename T>
void MpiCommunicator::ring_reduce_scatter(std::span<const T> in, std::span<T> out) const {
  const int n = size_;
  const int64_t total = static_cast<int64_t>(in.size());
  const int right = (rank_ + 1) % n;
  const int left = (rank_ + n - 1) % n;
  const int64_t segment = std::max<int64_t>(
      1, std::min<int64_t>(kRingSegmentBytes / sizeof(T), g_max_elements_per_call));
  T* scratch[2] = {nullptr, nullptr};
  if (n > 2) {
    T* base = reinterpret_cast<T*>(ring_scratch(2 * segment * sizeof(T)));
    scratch[0] = base;
    scratch[1] = base + segment;
  }
  // Block b's piece of the segment starting at `begin` (empty past the end of a shorter block).
  struct Piece {
    int64_t offset;  // into in
    int64_t count;
  };
  auto piece = [&](int b, int64_t begin) {
    const int64_t count = std::clamp<int64_t>(split_count(total, n, b) - begin, 0, segment);
    return Piece{split_offset(total, n, b) + begin, count};
  };
  const int64_t longest = split_count(total, n, 0);
  for (int64_t begin = 0; begin < longest; begin += segment) {
    const Piece first = piece((rank_ + n - 1) % n, begin);
    const T* send = in.data() + first.offset;
    int64_t send_count = first.count;
    for (int s = 0; s + 1 < n; ++s) {
      const Piece incoming = piece(((rank_ - s - 2) % n + n) % n, begin);
      T* recv =
          s + 2 == n ? (incoming.count > 0 ? out.data() + begin : out.data()) : scratch[s % 2];
      exchange<T>({send, static_cast<size_t>(send_count)}, right,
                  {recv, static_cast<size_t>(incoming.count)}, left, kCollectiveTag);
      add_into(recv, in.data() + incoming.offset, incoming.count);
      send = recv;
      send_count = incoming.count;
    }
  }
}

template <typename T>
void MpiCommunicator::mpi_reduce_scatter(std::span<const T> in, std::span<T> out) const {
  const int64_t total = static_cast<int64_t>(in.size());
  const int64_t limit = g_max_elements_per_call;
  if (total <= limit) {
    std::vector<int> counts(size_);
    for (int p = 0; p < size_; ++p) counts[p] = as_count(split_count(total, size_, p));
    MPI_Reduce_scatter(in.data(), out.data(), counts.data(), mpi_type<T>(), MPI_SUM, comm_);
    return;
  }
  // Too long for one call: reduce each owner's block to it, a chunk at a time.
  for (int owner = 0; owner < size_; ++owner) {
    const int64_t offset = split_offset(total, size_, owner);
    const int64_t count = split_count(total, size_, owner);
    for (int64_t begin = 0; begin < count; begin += limit) {
      const int64_t chunk = std::min(limit, count - begin);
      MPI_Reduce(in.data() + offset + begin, owner == rank_ ? out.data() + begin : nullptr,
                 as_count(chunk), mpi_type<T>(), MPI_SUM, owner, comm_);
    }
  }
}

void MpiCommunicator::all_reduce(void* in_out, int64_t count, ElementType type, ReduceOp op,
                                 const Stream& /*stream*/) const {
  visit_element_type(type, [&]<typename T>() {
    const int64_t limit = g_max_elements_per_call;
    T* data = static_cast<T*>(in_out);
    for (int64_t begin = 0; begin < count; begin += limit) {
      MPI_Allreduce(MPI_IN_PLACE, data + begin, as_count(std::min(limit, count - begin)),
                    mpi_type<T>(), mpi_op(op), comm_);
    }
  });
}

void MpiCommunicator::all_to_all(const void* in, void* out, int64_t part, ElementType type,
                                 const Stream& /*stream*/) const {
  visit_element_type(type, [&]<typename T>() {
    all_to_all_typed<T>(typed<T>(in, part * size_), typed<T>(out, part * size_));
  });
}

// Too long for one MPI_Alltoall: size() - 1 pairwise steps, step s sending block (rank + s) to
// its owner while receiving block (rank - s) from it, so every pair meets exactly once.
template <typename T>
void MpiCommunicator::all_to_all_typed(std::span<const T> in, std::span<T> out) const {
  const int64_t part = static_cast<int64_t>(in.size()) / size_;
  if (part == 0) return;
  if (part <= g_max_elements_per_call) {
    MPI_Alltoall(in.data(), as_count(part), mpi_type<T>(), out.data(), as_count(part),
                 mpi_type<T>(), comm_);
    return;
  }
  std::copy_n(in.data() + rank_ * part, part, out.data() + rank_ * part);
  for (int s = 1; s < size_; ++s) {
    const int dest = (rank_ + s) % size_;
    const int source = (rank_ - s + size_) % size_;
    exchange<T>(in.subspan(dest * part, part), dest, out.subspan(source * part, part), source,
                kCollectiveTag);
  }
}

// size() - 1 pairwise steps as all_to_all_typed's long path (chunked point to point, so any
// count fits): step s sends the block of rank (rank + s) while receiving rank (rank - s)'s.
void MpiCommunicator::all_to_allv(const void* in, const int64_t* send_counts, void* out,
                                  const int64_t* recv_counts, ElementType type,
                                  const Stream& /*stream*/) const {
  visit_element_type(type, [&]<typename T>() {
    std::vector<int64_t> send_begin(size_ + 1, 0), recv_begin(size_ + 1, 0);
    for (int p = 0; p < size_; ++p) {
      send_begin[p + 1] = send_begin[p] + send_counts[p];
      recv_begin[p + 1] = recv_begin[p] + recv_counts[p];
    }
    const std::span<const T> send = typed<T>(in, send_begin[size_]);
    const std::span<T> recv = typed<T>(out, recv_begin[size_]);
    std::copy_n(send.data() + send_begin[rank_], send_counts[rank_],
                recv.data() + recv_begin[rank_]);
    for (int s = 1; s < size_; ++s) {
      const int dest = (rank_ + s) % size_;
      const int source = (rank_ - s + size_) % size_;
      exchange<T>(send.subspan(send_begin[dest], send_counts[dest]), dest,
                  recv.subspan(recv_begin[source], recv_counts[source]), source, kCollectiveTag);
    }
  });
}

void MpiCommunicator::broadcast(void* data, int64_t count, ElementType type, int root,
                                const Stream& /*stream*/) const {
  visit_element_type(type, [&]<typename T>() {
    const int64_t limit = g_max_elements_per_call;
    T* elements = static_cast<T*>(data);
    for (int64_t begin = 0; begin < count; begin += limit) {
      MPI_Bcast(elements + begin, as_count(std::min(limit, count - begin)), mpi_type<T>(), root,
                comm_);
    }
  });
}

}  // namespace maxctx

// Communicator verbs over MPI (see communicator.h). Two kinds of path:
//  - one MPI collective call when every count fits max_elements_per_call();
//  - a ring of chunked MPI_Sendrecv otherwise (all-gathers), per-owner MPI_Reduce chunks
//    (MPI reduce-scatter), or slices of the same call (all-reduce, broadcast).
// The ring reduce-scatter is always a ring: it cuts the blocks into cache-sized segments and
// reduces each segment around the whole ring before the next, so the add reads data the receive
// has just brought into cache and the scratch space is two segments, not two blocks.
#include "maxctx/mesh/communicator.h"

#include <algorithm>
#include <climits>
#include <cstdint>
#include <type_traits>

#include "maxctx/core/buffer.h"
#include "maxctx/core/check.h"

namespace maxctx {
namespace {

// Measured by bench/collectives (2 ranks, float, 256 KiB ring segments; median of the timed
// iterations; busbw in the NCCL-tests convention), ring vs MPI_Reduce_scatter (Open MPI 4.1.4):
//   1 MiB per rank: 8.3 vs 5.5 GB/s (1.5x); 16 MiB: 3.2 vs 0.52 (6.1x); 64 MiB: 3.9 vs 0.42 (9.3x).
// Three runs gave speedups of 1.45-1.49x, 6.0-6.6x and 6.1-9.3x: the ring is the default.
ReduceScatterAlgorithm g_default_reduce_scatter = ReduceScatterAlgorithm::kRing;

int64_t g_max_elements_per_call = INT_MAX;

// A ring segment: small enough that the received part is still in L2 (1 MiB per core here) when
// it is added, large enough that the per-message cost (a few microseconds) stays under 5%.
constexpr size_t kRingSegmentBytes = size_t{256} << 10;

// User tags stay below this; the rings of the collectives use kCollectiveTag, so a pending user
// irecv can never match a collective's message. 32767 is the smallest MPI_TAG_UB MPI allows.
constexpr int kMaxUserTag = 32000;
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

// Every count handed to MPI passes through here: the chunking above must already have made it fit.
int as_count(int64_t n) {
  MAXCTX_CHECK(n >= 0 && n <= INT_MAX, "an MPI count of {} elements: chunking missed it", n);
  return static_cast<int>(n);
}

// A point-to-point transfer of n elements is this many messages (at least one, even when empty,
// so that both sides always agree on the number of messages).
int64_t num_messages(int64_t n, int64_t limit) { return n == 0 ? 1 : (n + limit - 1) / limit; }

bool overlaps(const void* a, size_t a_bytes, const void* b, size_t b_bytes) {
  if (a_bytes == 0 || b_bytes == 0) return false;
  const auto a_begin = reinterpret_cast<uintptr_t>(a);
  const auto b_begin = reinterpret_cast<uintptr_t>(b);
  return a_begin < b_begin + b_bytes && b_begin < a_begin + a_bytes;
}

// Scratch for the ring reduce-scatter's intermediate steps (ranks > 2). One per process: only the
// main thread calls MPI (MPI_THREAD_FUNNELED) and no verb is re-entered.
std::byte* ring_scratch(size_t bytes) {
  static AlignedBuffer scratch;
  if (scratch.size() < bytes) scratch = AlignedBuffer(bytes);
  return scratch.data();
}

template <typename T>
void add_into(T* __restrict acc, const T* __restrict in, int64_t n) {
  for (int64_t i = 0; i < n; ++i) acc[i] = static_cast<T>(acc[i] + in[i]);
}

void check_user_tag(int tag) {
  MAXCTX_CHECK(tag >= 0 && tag < kMaxUserTag, "tag {}: point-to-point tags are 0..{}", tag,
               kMaxUserTag - 1);
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

std::string_view algorithm_name(ReduceScatterAlgorithm algorithm) {
  return algorithm == ReduceScatterAlgorithm::kRing ? "ring" : "mpi";
}

void set_default_reduce_scatter_algorithm(ReduceScatterAlgorithm algorithm) {
  g_default_reduce_scatter = algorithm;
}

ReduceScatterAlgorithm default_reduce_scatter_algorithm() { return g_default_reduce_scatter; }

void set_max_elements_per_call(int64_t max_elements) {
  MAXCTX_CHECK(max_elements >= 1 && max_elements <= INT_MAX,
               "max elements per MPI call is {}: allowed 1..{}", max_elements, INT_MAX);
  g_max_elements_per_call = max_elements;
}

int64_t max_elements_per_call() { return g_max_elements_per_call; }

// --- Request ---------------------------------------------------------------------------------

Request::Request(Request&& other) noexcept
    : requests_(std::move(other.requests_)),
      expected_(std::move(other.expected_)),
      type_(other.type_) {
  other.requests_.clear();
  other.expected_.clear();
}

Request& Request::operator=(Request&& other) noexcept {
  if (this != &other) {
    wait();
    requests_ = std::move(other.requests_);
    expected_ = std::move(other.expected_);
    type_ = other.type_;
    other.requests_.clear();
    other.expected_.clear();
  }
  return *this;
}

Request::~Request() { wait(); }

void Request::wait() {
  if (requests_.empty()) return;
  std::vector<MPI_Status> statuses(requests_.size());
  MPI_Waitall(static_cast<int>(requests_.size()), requests_.data(), statuses.data());
  for (size_t i = 0; i < statuses.size(); ++i) check_received(statuses[i], type_, expected_[i]);
  requests_.clear();
  expected_.clear();
}

void wait_all(std::span<Request> requests) {
  std::vector<MPI_Request> all;
  for (const Request& request : requests) {
    all.insert(all.end(), request.requests_.begin(), request.requests_.end());
  }
  std::vector<MPI_Status> statuses(all.size());
  MPI_Waitall(static_cast<int>(all.size()), all.data(), statuses.data());
  size_t next = 0;
  for (Request& request : requests) {
    for (int64_t expected : request.expected_) {
      check_received(statuses[next++], request.type_, expected);
    }
    request.requests_.clear();
    request.expected_.clear();
  }
}

// --- Communicator: lifetime --------------------------------------------------------------------

Communicator::Communicator(MPI_Comm comm, bool owned) : comm_(comm), owned_(owned) {
  MPI_Comm_rank(comm_, &rank_);
  MPI_Comm_size(comm_, &size_);
}

Communicator Communicator::world() { return Communicator(MPI_COMM_WORLD, false); }
Communicator Communicator::self() { return Communicator(MPI_COMM_SELF, false); }
Communicator Communicator::adopt(MPI_Comm comm) {
  MAXCTX_CHECK(comm != MPI_COMM_NULL, "adopting MPI_COMM_NULL");
  return Communicator(comm, true);
}

Communicator::Communicator(Communicator&& other) noexcept
    : comm_(other.comm_), owned_(other.owned_), rank_(other.rank_), size_(other.size_) {
  other.comm_ = MPI_COMM_NULL;
  other.owned_ = false;
}

Communicator& Communicator::operator=(Communicator&& other) noexcept {
  if (this != &other) {
    Communicator doomed(std::move(*this));
    comm_ = other.comm_;
    owned_ = other.owned_;
    rank_ = other.rank_;
    size_ = other.size_;
    other.comm_ = MPI_COMM_NULL;
    other.owned_ = false;
  }
  return *this;
}

Communicator::~Communicator() {
  if (!owned_ || comm_ == MPI_COMM_NULL) return;
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized) MPI_Comm_free(&comm_);
}

Communicator Communicator::split(int color, int key) const {
  MPI_Comm comm = MPI_COMM_NULL;
  MPI_Comm_split(comm_, color, key, &comm);
  return adopt(comm);
}

void Communicator::barrier() const { MPI_Barrier(comm_); }

// --- Communicator: point to point --------------------------------------------------------------

template <typename T>
Request Communicator::isend(std::span<const T> data, int dest, int tag) const {
  check_user_tag(tag);
  return post_send(data, dest, tag);
}

template <typename T>
Request Communicator::irecv(std::span<T> data, int source, int tag) const {
  check_user_tag(tag);
  return post_recv(data, source, tag);
}

template <typename T>
void Communicator::send_recv(std::span<const T> send, int dest, std::span<T> recv, int source,
                             int tag) const {
  check_user_tag(tag);
  exchange(send, dest, recv, source, tag);
}

template <typename T>
Request Communicator::post_send(std::span<const T> data, int dest, int tag) const {
  const int64_t limit = g_max_elements_per_call;
  const int64_t n = static_cast<int64_t>(data.size());
  const int64_t messages = num_messages(n, limit);
  Request request;
  request.type_ = mpi_type<T>();
  request.requests_.resize(messages);
  request.expected_.assign(messages, -1);
  for (int64_t m = 0; m < messages; ++m) {
    const int64_t begin = m * limit;
    const int64_t count = std::min(limit, n - begin);
    MPI_Isend(data.data() + begin, as_count(count), request.type_, dest, tag, comm_,
              &request.requests_[m]);
  }
  return request;
}

template <typename T>
Request Communicator::post_recv(std::span<T> data, int source, int tag) const {
  const int64_t limit = g_max_elements_per_call;
  const int64_t n = static_cast<int64_t>(data.size());
  const int64_t messages = num_messages(n, limit);
  Request request;
  request.type_ = mpi_type<T>();
  request.requests_.resize(messages);
  request.expected_.resize(messages);
  for (int64_t m = 0; m < messages; ++m) {
    const int64_t begin = m * limit;
    const int64_t count = std::min(limit, n - begin);
    request.expected_[m] = source == MPI_PROC_NULL ? -1 : count;
    MPI_Irecv(data.data() + begin, as_count(count), request.type_, source, tag, comm_,
              &request.requests_[m]);
  }
  return request;
}

template <typename T>
void Communicator::exchange(std::span<const T> send, int dest, std::span<T> recv, int source,
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
  Request requests[2] = {post_recv(recv, source, tag), post_send(send, dest, tag)};
  wait_all(requests);
}

// --- Communicator: collectives -----------------------------------------------------------------

template <typename T>
void Communicator::all_gather(std::span<const T> mine, std::span<T> out) const {
  const int64_t n = static_cast<int64_t>(mine.size());
  MAXCTX_CHECK_EQ(static_cast<int64_t>(out.size()), n * size_,
                  "all_gather: out must hold size() = {} parts of {} elements", size_, n);
  if (n == 0) return;
  if (n > g_max_elements_per_call) return ring_all_gather(mine, out, false);
  const bool in_place = mine.data() == out.data() + rank_ * n;
  MPI_Allgather(in_place ? MPI_IN_PLACE : mine.data(), as_count(n), mpi_type<T>(), out.data(),
                as_count(n), mpi_type<T>(), comm_);
}

template <typename T>
void Communicator::all_gather_uneven(std::span<const T> mine, std::span<T> out) const {
  const int64_t total = static_cast<int64_t>(out.size());
  const int64_t my_offset = split_offset(total, size_, rank_);
  MAXCTX_CHECK_EQ(static_cast<int64_t>(mine.size()), split_count(total, size_, rank_),
                  "all_gather_uneven: rank {} of {} holds this block of {} elements", rank_, size_,
                  total);
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
void Communicator::ring_all_gather(std::span<const T> mine, std::span<T> out, bool uneven) const {
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

template <typename T>
void Communicator::reduce_scatter(std::span<const T> in, std::span<T> out) const {
  reduce_scatter(in, out, g_default_reduce_scatter);
}

template <typename T>
void Communicator::reduce_scatter(std::span<const T> in, std::span<T> out,
                                  ReduceScatterAlgorithm algorithm) const {
  const int64_t total = static_cast<int64_t>(in.size());
  MAXCTX_CHECK_EQ(static_cast<int64_t>(out.size()), split_count(total, size_, rank_),
                  "reduce_scatter: out is rank {}'s block of {} elements over {} ranks", rank_,
                  total, size_);
  MAXCTX_CHECK(!overlaps(in.data(), in.size_bytes(), out.data(), out.size_bytes()),
               "reduce_scatter: out overlaps in; reduce into a separate buffer");
  if (total == 0) return;
  if (size_ == 1) {
    std::copy(in.begin(), in.end(), out.begin());
    return;
  }
  if (algorithm == ReduceScatterAlgorithm::kRing) {
    ring_reduce_scatter(in, out);
  } else {
    mpi_reduce_scatter(in, out);
  }
}

// Segment by segment (the same element range of every block), n-1 steps: at step s rank r sends
// its running sum of block (r - s - 1) to the right and receives the left neighbour's running sum
// of block (r - s - 2), adding its own part. After the last step it holds the full sum of block r.
template <typename T>
void Communicator::ring_reduce_scatter(std::span<const T> in, std::span<T> out) const {
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
void Communicator::mpi_reduce_scatter(std::span<const T> in, std::span<T> out) const {
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

template <typename T>
void Communicator::all_reduce(std::span<T> in_out, ReduceOp op) const {
  const int64_t n = static_cast<int64_t>(in_out.size());
  const int64_t limit = g_max_elements_per_call;
  for (int64_t begin = 0; begin < n; begin += limit) {
    MPI_Allreduce(MPI_IN_PLACE, in_out.data() + begin, as_count(std::min(limit, n - begin)),
                  mpi_type<T>(), mpi_op(op), comm_);
  }
}

template <typename T>
void Communicator::broadcast(std::span<T> data, int root) const {
  MAXCTX_CHECK(root >= 0 && root < size_, "broadcast root {} of {} ranks", root, size_);
  const int64_t n = static_cast<int64_t>(data.size());
  const int64_t limit = g_max_elements_per_call;
  for (int64_t begin = 0; begin < n; begin += limit) {
    MPI_Bcast(data.data() + begin, as_count(std::min(limit, n - begin)), mpi_type<T>(), root,
              comm_);
  }
}

#define MAXCTX_INSTANTIATE_VERBS(T)                                                                \
  template void Communicator::all_gather<T>(std::span<const T>, std::span<T>) const;               \
  template void Communicator::all_gather_uneven<T>(std::span<const T>, std::span<T>) const;        \
  template void Communicator::reduce_scatter<T>(std::span<const T>, std::span<T>) const;           \
  template void Communicator::reduce_scatter<T>(std::span<const T>, std::span<T>,                  \
                                                ReduceScatterAlgorithm) const;                     \
  template void Communicator::all_reduce<T>(std::span<T>, ReduceOp) const;                         \
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

}  // namespace maxctx

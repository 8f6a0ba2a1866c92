// Communicator: a small value type over MPI_Comm with the handful of verbs maxctx needs
// (all_gather, reduce_scatter, all_reduce, broadcast, send_recv, isend/irecv, barrier).
//
// What it is not: a general MPI wrapper. Verbs take spans of one element type (float, double,
// int32_t, int64_t, uint16_t for bf16 bits, int8_t, uint8_t; call as `comm.all_gather<float>(a,
// b)` to pass vectors) and check every size against the others (MAXCTX_CHECK, values printed).
// Reductions on uint16_t are integer reductions of the bits: reduce bf16 as float.
//
// Invariants: every verb except the point-to-point ones is collective over the communicator, and
// every rank must call it with matching sizes. Uneven parts always follow split_counts (first
// total % parts blocks one element longer). No single MPI call carries more than
// max_elements_per_call() elements (Open MPI 4.1 has no large-count calls); longer transfers are
// cut into chunks, and every rank must use the same limit. A point-to-point transfer of n elements
// is always max(1, ceil(n / limit)) messages, so send_recv, isend and irecv pair up with each
// other.
#pragma once

#include <mpi.h>

#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "maxctx/core/split.h"

namespace maxctx {

enum class ReduceOp { kSum, kMax, kMin };

// kRing: n-1 steps of sendrecv to the right neighbour plus a local add, in cache-sized segments.
// kMpi: MPI_Reduce_scatter.
enum class ReduceScatterAlgorithm { kRing, kMpi };

std::string_view algorithm_name(ReduceScatterAlgorithm algorithm);  // "ring", "mpi"
void set_default_reduce_scatter_algorithm(ReduceScatterAlgorithm algorithm);
ReduceScatterAlgorithm default_reduce_scatter_algorithm();

// The most elements one MPI call may carry (default INT_MAX). Tests lower it to exercise the
// chunked paths; every rank must set the same value.
void set_max_elements_per_call(int64_t max_elements);
int64_t max_elements_per_call();

// A pending isend or irecv. Move-only; wait() completes it (and checks that a receive got exactly
// the elements its buffer holds). A Request destroyed while pending waits first, so its buffer is
// never written after it is freed.
class Request {
 public:
  Request() = default;
  Request(Request&& other) noexcept;
  Request& operator=(Request&& other) noexcept;
  Request(const Request&) = delete;
  Request& operator=(const Request&) = delete;
  ~Request();

  void wait();
  bool pending() const { return !requests_.empty(); }

 private:
  friend class Communicator;
  friend void wait_all(std::span<Request> requests);

  std::vector<MPI_Request> requests_;  // one per chunk
  std::vector<int64_t> expected_;      // elements per chunk for receives, -1 for sends
  MPI_Datatype type_ = MPI_DATATYPE_NULL;
};

// Waits for all of them with one MPI_Waitall, so no transfer waits behind another.
void wait_all(std::span<Request> requests);

class Communicator {
 public:
  Communicator() = default;                  // empty: rank 0 of 1, usable only as a move target
  static Communicator world();               // MPI_COMM_WORLD, never freed
  static Communicator self();                // MPI_COMM_SELF, never freed
  static Communicator adopt(MPI_Comm comm);  // takes ownership: freed on destruction

  Communicator(Communicator&& other) noexcept;
  Communicator& operator=(Communicator&& other) noexcept;
  Communicator(const Communicator&) = delete;
  Communicator& operator=(const Communicator&) = delete;
  ~Communicator();

  int rank() const { return rank_; }
  int size() const { return size_; }
  MPI_Comm raw() const { return comm_; }

  // Collective MPI_Comm_split: ranks with the same color form a communicator, ordered by key.
  Communicator split(int color, int key) const;

  // out (size() * mine.size()) = every rank's `mine`, in rank order. `mine` may already sit in
  // its place in out (in place).
  template <typename T>
  void all_gather(std::span<const T> mine, std::span<T> out) const;

  // out (total) = every rank's block under split_counts(total, size()); mine holds my block and
  // may already sit in its place in out.
  template <typename T>
  void all_gather_uneven(std::span<const T> mine, std::span<T> out) const;

  // out = my block (split_counts(in.size(), size())[rank()]) of the element-wise sum of every
  // rank's `in`. out must not overlap in.
  template <typename T>
  void reduce_scatter(std::span<const T> in, std::span<T> out) const;
  template <typename T>
  void reduce_scatter(std::span<const T> in, std::span<T> out,
                      ReduceScatterAlgorithm algorithm) const;

  template <typename T>
  void all_reduce(std::span<T> in_out, ReduceOp op) const;

  template <typename T>
  void broadcast(std::span<T> data, int root) const;

  // Sends `send` to dest while receiving `recv` from source (either may be MPI_PROC_NULL).
  // Tags are 0..31999; the collectives' own messages use a tag above that range.
  template <typename T>
  void send_recv(std::span<const T> send, int dest, std::span<T> recv, int source,
                 int tag = 0) const;

  template <typename T>
  [[nodiscard]] Request isend(std::span<const T> data, int dest, int tag = 0) const;
  template <typename T>
  [[nodiscard]] Request irecv(std::span<T> data, int source, int tag = 0) const;

  void barrier() const;

 private:
  Communicator(MPI_Comm comm, bool owned);

  // The point-to-point verbs without the user-tag check (the collectives' rings use their own tag).
  template <typename T>
  Request post_send(std::span<const T> data, int dest, int tag) const;
  template <typename T>
  Request post_recv(std::span<T> data, int source, int tag) const;
  template <typename T>
  void exchange(std::span<const T> send, int dest, std::span<T> recv, int source, int tag) const;

  template <typename T>
  void ring_all_gather(std::span<const T> mine, std::span<T> out, bool uneven) const;
  template <typename T>
  void ring_reduce_scatter(std::span<const T> in, std::span<T> out) const;
  template <typename T>
  void mpi_reduce_scatter(std::span<const T> in, std::span<T> out) const;

  MPI_Comm comm_ = MPI_COMM_NULL;
  bool owned_ = false;
  int rank_ = 0;
  int size_ = 1;
};

}  // namespace maxctx

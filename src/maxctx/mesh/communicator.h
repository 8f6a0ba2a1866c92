// Communicator: the value type callers talk to, over a backend behind CommunicatorImpl
// (communicator_impl.h), after MLX's Group over GroupImpl. Verbs: all_gather(_uneven),
// reduce_scatter, all_reduce, all_to_all(v), broadcast, send_recv, isend/irecv, barrier, split.
// What it is not: a backend. It checks every size, tag and peer (values printed) and hands a
// type-erased call to its impl; no header here names MPI. Backends: MPI on host memory; for
// device memory NCCL or MPI staged through the host (device_collectives.h). Verbs on device
// memory run on a Stream (core/stream.h): the tensor-view verbs take the caller's, the span verbs
// run on the one chosen with on() (the host's by default).
//
// Invariants: every verb but the point-to-point ones is collective, with matching sizes on every
// rank. Uneven parts follow split_counts. Span verbs take float, double, int32_t, int64_t,
// uint16_t (bf16 bits: reduce bf16 as float), int8_t, uint8_t (`comm.all_gather<float>(a, b)`
// to pass vectors). Copies share one backend communicator, freed with the last copy.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string_view>
#include <utility>
#include <vector>

#include "maxctx/core/split.h"
#include "maxctx/core/stream.h"
#include "maxctx/core/trace.h"

namespace maxctx {

class CommunicatorImpl;
class RequestImpl;
class TensorView;

enum class ReduceOp { kSum, kMax, kMin };

// How reduce_scatter reduces. kRing: the backend's own ring, n-1 steps of a send to the right
// neighbour plus a local add, in cache-sized segments. kMpi: the communication library's own
// reduce-scatter (MPI_Reduce_scatter in the MPI backend).
enum class ReduceScatterAlgorithm { kRing, kMpi };

std::string_view algorithm_name(ReduceScatterAlgorithm algorithm);  // "ring", "mpi"
void set_default_reduce_scatter_algorithm(ReduceScatterAlgorithm algorithm);
ReduceScatterAlgorithm default_reduce_scatter_algorithm();

// A peer of the point-to-point verbs that means "nobody": that side of the transfer does nothing.
inline constexpr int kNoPeer = -1;

// A pending isend or irecv. Move-only; wait() completes it (and checks that a receive got exactly
// the elements its buffer holds). A Request destroyed while pending waits first, so its buffer is
// never written after it is freed.
class Request {
 public:
  Request();
  explicit Request(std::unique_ptr<RequestImpl> impl);
  Request(Request&& other) noexcept;
  Request& operator=(Request&& other) noexcept;
  Request(const Request&) = delete;
  Request& operator=(const Request&) = delete;
  ~Request();

  void wait();
  bool pending() const { return impl_ != nullptr; }

  // While tracing: the transfer is recorded on the "in flight" track from now to its completion.
  void trace_transfer(const char* name, const char* axis, int64_t bytes);

 private:
  friend void wait_all(std::span<Request> requests);
  void finish_trace();

  std::unique_ptr<RequestImpl> impl_;  // null once completed
  trace::Event transfer_;              // begin_ns != 0 while a traced transfer is pending
};

// Waits for all of them together (one MPI_Waitall in the MPI backend), so no transfer waits
// behind another.
void wait_all(std::span<Request> requests);

class Communicator {
 public:
  Communicator();  // empty: rank 0 of 1, usable only as an assignment target
  explicit Communicator(std::shared_ptr<CommunicatorImpl> impl);
  static Communicator world();  // every rank the launcher started (MPI_COMM_WORLD)
  static Communicator self();   // this rank alone (MPI_COMM_SELF)

  Communicator(const Communicator&) = default;
  Communicator& operator=(const Communicator&) = default;
  Communicator(Communicator&&) noexcept = default;
  Communicator& operator=(Communicator&&) noexcept = default;
  ~Communicator();

  int rank() const;
  int size() const;
  // The backend, for code that must reach under the interface (the MPI bootstrap in mesh/).
  CommunicatorImpl* impl() const { return impl_.get(); }
  const std::shared_ptr<CommunicatorImpl>& shared_impl() const { return impl_; }
  // The backend that moves tensor views in a backend's device memory (Device::kCuda): NCCL, or
  // MPI staged through host buffers (mesh/device_collectives.h sets it). Span verbs and host
  // views keep the host backend; a device view on a communicator without one is an error.
  void set_device_collectives(std::shared_ptr<CommunicatorImpl> device) {
    device_impl_ = std::move(device);
  }
  CommunicatorImpl* device_impl() const { return device_impl_.get(); }
  // The name its spans carry in a trace (the mesh axes it spans, e.g. "context"); split()
  // copies inherit "split" until renamed.
  const char* trace_name() const { return trace_name_; }
  void set_trace_name(std::string_view name) { trace_name_ = trace::intern(name); }

  // A copy whose span verbs run on `stream` (communicator_impl.h): for span verbs on device
  // memory, which a communicator over a device backend takes (the NCCL backend's own tests). A
  // communicator's span verbs run on the host's stream unless chosen here; the tensor-view verbs
  // below take theirs in each call.
  Communicator on(const Stream& stream) const {
    Communicator copy = *this;
    copy.stream_ = stream;
    return copy;
  }
  const Stream& stream() const { return stream_; }

  // Collective: ranks with the same color form a communicator, ordered by key (on this one's
  // stream).
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

  // in and out hold size() blocks of in.size() / size() elements: block p of `in` goes to rank p,
  // block p of `out` came from rank p. out must not overlap in.
  template <typename T>
  void all_to_all(std::span<const T> in, std::span<T> out) const;

  // The uneven all_to_all (MPI_Alltoallv): `in` holds size() blocks in rank order, block p of
  // send_counts[p] elements going to rank p; `out` receives block p of recv_counts[p] elements
  // from rank p, in rank order. Each pair must agree (my send_counts[p] is p's
  // recv_counts[me]; a receive checks it got exactly that many). out must not overlap in.
  template <typename T>
  void all_to_allv(std::span<const T> in, std::span<const int64_t> send_counts, std::span<T> out,
                   std::span<const int64_t> recv_counts) const;

  template <typename T>
  void broadcast(std::span<T> data, int root) const;

  // Sends `send` to dest while receiving `recv` from source (either may be kNoPeer).
  // Tags are 0..31999; the collectives' own messages use a tag above that range.
  template <typename T>
  void send_recv(std::span<const T> send, int dest, std::span<T> recv, int source,
                 int tag = 0) const;

  template <typename T>
  [[nodiscard]] Request isend(std::span<const T> data, int dest, int tag = 0) const;
  template <typename T>
  [[nodiscard]] Request irecv(std::span<T> data, int source, int tag = 0) const;

  void barrier() const;

  // The collectives on tensor views: the same contracts, over each view's elements in memory
  // order (shapes are the caller's business; element counts and dtypes are checked). f32 for
  // every verb; bf16 and int8 move as raw bits, so they may be gathered and exchanged but not
  // reduced (reduce bf16 as f32). The MPI backend requires host memory.
  //
  // `stream`: the stream the views' producers and consumers run on (Kernels::stream() of the
  // backend that owns them). A verb on device views runs on it (communicator_impl.h); on host
  // views it is not used.
  void all_gather(const TensorView& mine, const TensorView& out, const Stream& stream) const;
  void all_gather_uneven(const TensorView& mine, const TensorView& out, const Stream& stream) const;
  void reduce_scatter(const TensorView& in, const TensorView& out, const Stream& stream) const;
  void all_reduce(const TensorView& in_out, ReduceOp op, const Stream& stream) const;
  void all_to_all(const TensorView& in, const TensorView& out, const Stream& stream) const;
  void all_to_allv(const TensorView& in, std::span<const int64_t> send_counts,
                   const TensorView& out, std::span<const int64_t> recv_counts,
                   const Stream& stream) const;
  void send_recv(const TensorView& send, int dest, const TensorView& recv, int source, int tag,
                 const Stream& stream) const;
  [[nodiscard]] Request isend(const TensorView& data, int dest, int tag,
                              const Stream& stream) const;
  [[nodiscard]] Request irecv(const TensorView& data, int source, int tag,
                              const Stream& stream) const;

 private:
  const CommunicatorImpl& backend() const;  // checks that this communicator is not empty
  // The communicator whose span verbs move `view`'s memory: this one for host views, one over
  // device_impl_ (same trace name) whose span verbs run on `stream` for device views.
  Communicator for_memory_of(const TensorView& view, const Stream& stream) const;
  Communicator for_memory_of(const TensorView& a, const TensorView& b, const char* verb,
                             const Stream& stream) const;

  std::shared_ptr<CommunicatorImpl> impl_;
  std::shared_ptr<CommunicatorImpl> device_impl_;  // null: host memory only
  const char* trace_name_ = "world";
  Stream stream_;  // what the span verbs run on (on(), for_memory_of's copies); the host's
};

}  // namespace maxctx

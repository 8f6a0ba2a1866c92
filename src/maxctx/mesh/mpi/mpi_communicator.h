// The MPI backend of Communicator: every verb over one MPI_Comm, on host memory. MPI is also the
// launcher and bootstrap: Communicator::world()/self() come from here, and the mesh finds its
// nodes through the MPI_Comm underneath (mpi_comm). Not for callers: only mesh/ and tests of the
// MPI paths include this, the one mesh header with <mpi.h> in it.
//
// Invariant: no MPI call gets a count above max_elements_per_call() (Open MPI 4.1 has no
// large-count calls); longer transfers are cut into chunks, and every rank must use the same
// limit. A point-to-point transfer of n elements is always max(1, ceil(n / limit)) messages, so
// send_recv, isend and irecv pair up with each other.
#pragma once

#include <mpi.h>

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "maxctx/mesh/communicator.h"
#include "maxctx/mesh/communicator_impl.h"

namespace maxctx {

// The most elements one MPI call may carry (default INT_MAX). Tests lower it to exercise the
// chunked paths; every rank must set the same value.
void set_max_elements_per_call(int64_t max_elements);
int64_t max_elements_per_call();

Communicator mpi_world();                     // MPI_COMM_WORLD, never freed
Communicator mpi_self();                      // MPI_COMM_SELF, never freed
Communicator adopt_mpi_comm(MPI_Comm comm);   // takes ownership: freed with the last copy
MPI_Comm mpi_comm(const Communicator& comm);  // the MPI_Comm under an MPI-backed communicator

// A pending isend or irecv: one MPI_Request per chunk.
class MpiRequest final : public RequestImpl {
 public:
  MpiRequest() = default;
  MpiRequest(const MpiRequest&) = delete;
  MpiRequest& operator=(const MpiRequest&) = delete;

  void wait() override;
  void wait_all(std::span<RequestImpl* const> batch) override;

 private:
  friend class MpiCommunicator;
  // Completes all of them with one MPI_Waitall, then checks the received counts.
  static void wait_together(std::span<MpiRequest* const> requests);

  std::vector<MPI_Request> requests_;  // one per chunk
  std::vector<int64_t> expected_;      // elements per chunk for receives, -1 for sends
  MPI_Datatype type_ = MPI_DATATYPE_NULL;
};

class MpiCommunicator final : public CommunicatorImpl {
 public:
  MpiCommunicator(MPI_Comm comm, bool owned);  // owned: MPI_Comm_free on destruction
  MpiCommunicator(const MpiCommunicator&) = delete;
  MpiCommunicator& operator=(const MpiCommunicator&) = delete;
  ~MpiCommunicator() override;

  MPI_Comm comm() const { return comm_; }

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::shared_ptr<CommunicatorImpl> split(int color, int key) const override;

  // The host's memory, so every verb has finished when it returns: `stream` is not used.
  void all_gather(const void* mine, void* out, int64_t part, ElementType type,
                  const Stream& stream) const override;
  void all_gather_uneven(const void* mine, void* out, int64_t total, ElementType type,
                         const Stream& stream) const override;
  void reduce_scatter(const void* in, void* out, int64_t total, ElementType type,
                      ReduceScatterAlgorithm algorithm, const Stream& stream) const override;
  void all_reduce(void* in_out, int64_t count, ElementType type, ReduceOp op,
                  const Stream& stream) const override;
  void all_to_all(const void* in, void* out, int64_t part, ElementType type,
                  const Stream& stream) const override;
  void all_to_allv(const void* in, const int64_t* send_counts, void* out,
                   const int64_t* recv_counts, ElementType type,
                   const Stream& stream) const override;
  void broadcast(void* data, int64_t count, ElementType type, int root,
                 const Stream& stream) const override;

  void send_recv(const void* send, int64_t send_count, int dest, void* recv, int64_t recv_count,
                 int source, ElementType type, int tag, const Stream& stream) const override;
  std::unique_ptr<RequestImpl> isend(const void* data, int64_t count, ElementType type, int dest,
                                     int tag, const Stream& stream) const override;
  std::unique_ptr<RequestImpl> irecv(void* data, int64_t count, ElementType type, int source,
                                     int tag, const Stream& stream) const override;

  void barrier() const override;

 private:
  // Point to point, chunked (the collectives' rings call these with their own tag).
  template <typename T>
  std::unique_ptr<MpiRequest> post_send(std::span<const T> data, int dest, int tag) const;
  template <typename T>
  std::unique_ptr<MpiRequest> post_recv(std::span<T> data, int source, int tag) const;
  template <typename T>
  void exchange(std::span<const T> send, int dest, std::span<T> recv, int source, int tag) const;

  template <typename T>
  void all_gather_typed(std::span<const T> mine, std::span<T> out) const;
  template <typename T>
  void all_gather_uneven_typed(std::span<const T> mine, std::span<T> out) const;
  template <typename T>
  void ring_all_gather(std::span<const T> mine, std::span<T> out, bool uneven) const;
  template <typename T>
  void ring_reduce_scatter(std::span<const T> in, std::span<T> out) const;
  template <typename T>
  void mpi_reduce_scatter(std::span<const T> in, std::span<T> out) const;
  template <typename T>
  void all_to_all_typed(std::span<const T> in, std::span<T> out) const;

  MPI_Comm comm_ = MPI_COMM_NULL;
  bool owned_ = false;
  int rank_ = 0;
  int size_ = 1;
};

}  // namespace maxctx

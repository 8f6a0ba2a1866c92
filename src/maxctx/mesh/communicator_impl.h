// The backend's side of Communicator (communicator.h): the verbs as virtual functions on
// type-erased element runs. A backend (mesh/mpi/ today; NCCL per axis is the next one) derives
// from CommunicatorImpl and RequestImpl; callers never see these classes.
//
// What it is not: a place for argument checks. Communicator has checked every size, overlap, tag,
// peer and root before it calls in, so an implementation may assume them; it only moves and
// reduces. Counts are elements of `type`, never bytes, and are int64_t: chunking to a library's
// count limit is the backend's business. Whether buffers are host or device memory is the
// backend's contract too (the MPI backend requires host memory).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <type_traits>
#include <utility>

#include "maxctx/core/stream.h"
#include "maxctx/mesh/communicator.h"

namespace maxctx {

// The element types the span verbs take. u16 carries bf16 bits (never reduced as bf16).
enum class ElementType : uint8_t { kF32, kF64, kI32, kI64, kU16, kI8, kU8 };

template <typename T>
constexpr ElementType element_type_of() {
  if constexpr (std::is_same_v<T, float>) {
    return ElementType::kF32;
  } else if constexpr (std::is_same_v<T, double>) {
    return ElementType::kF64;
  } else if constexpr (std::is_same_v<T, int32_t>) {
    return ElementType::kI32;
  } else if constexpr (std::is_same_v<T, int64_t>) {
    return ElementType::kI64;
  } else if constexpr (std::is_same_v<T, uint16_t>) {
    return ElementType::kU16;
  } else if constexpr (std::is_same_v<T, int8_t>) {
    return ElementType::kI8;
  } else {
    static_assert(std::is_same_v<T, uint8_t>, "no communicator element type for this type");
    return ElementType::kU8;
  }
}

// Calls f.template operator()<T>() with the C++ type of `type`: the one switch from a runtime
// element type back to typed code.
template <typename F>
decltype(auto) visit_element_type(ElementType type, F&& f) {
  switch (type) {
    case ElementType::kF32:
      return f.template operator()<float>();
    case ElementType::kF64:
      return f.template operator()<double>();
    case ElementType::kI32:
      return f.template operator()<int32_t>();
    case ElementType::kI64:
      return f.template operator()<int64_t>();
    case ElementType::kU16:
      return f.template operator()<uint16_t>();
    case ElementType::kI8:
      return f.template operator()<int8_t>();
    case ElementType::kU8:
      break;
  }
  return f.template operator()<uint8_t>();
}

// One pending isend or irecv of some backend; Request owns it and waits before dropping it.
class RequestImpl {
 public:
  virtual ~RequestImpl() = default;
  // Completes the transfer; a receive checks that it got exactly the elements its buffer holds.
  virtual void wait() = 0;
  // Completes every request of `batch` (this one among them, all of this backend) together.
  virtual void wait_all(std::span<RequestImpl* const> batch) = 0;
};

// The verbs of communicator.h, same contracts, one element type per call. Every verb that moves
// data runs on `stream` (MLX's GroupImpl): it reads what the work issued to that stream before the
// call wrote, and the work issued to it after the call sees its results. A blocking verb has
// also finished when it returns (the Communicator contract, which the collective watchdog
// watches); a posted isend/irecv has finished at its Request's wait. Backends on host memory
// (MPI, the host-staged device backend) finish every verb before returning and ignore it; the
// NCCL backend orders its own stream against it (nccl_communicator.h).
class CommunicatorImpl {
 public:
  virtual ~CommunicatorImpl() = default;

  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual std::shared_ptr<CommunicatorImpl> split(int color, int key) const = 0;

  // part: the elements every rank contributes.
  virtual void all_gather(const void* mine, void* out, int64_t part, ElementType type,
                          const Stream& stream) const = 0;
  // total: out's elements; mine holds split_count(total, size(), rank()) of them.
  virtual void all_gather_uneven(const void* mine, void* out, int64_t total, ElementType type,
                                 const Stream& stream) const = 0;
  // total: in's elements; out holds split_count(total, size(), rank()) of them.
  virtual void reduce_scatter(const void* in, void* out, int64_t total, ElementType type,
                              ReduceScatterAlgorithm algorithm, const Stream& stream) const = 0;
  virtual void all_reduce(void* in_out, int64_t count, ElementType type, ReduceOp op,
                          const Stream& stream) const = 0;
  // part: the elements of one block; in and out hold size() blocks.
  virtual void all_to_all(const void* in, void* out, int64_t part, ElementType type,
                          const Stream& stream) const = 0;
  // send_counts, recv_counts: size() elements each; blocks follow each other in rank order.
  virtual void all_to_allv(const void* in, const int64_t* send_counts, void* out,
                           const int64_t* recv_counts, ElementType type,
                           const Stream& stream) const = 0;
  virtual void broadcast(void* data, int64_t count, ElementType type, int root,
                         const Stream& stream) const = 0;

  virtual void send_recv(const void* send, int64_t send_count, int dest, void* recv,
                         int64_t recv_count, int source, ElementType type, int tag,
                         const Stream& stream) const = 0;
  virtual std::unique_ptr<RequestImpl> isend(const void* data, int64_t count, ElementType type,
                                             int dest, int tag, const Stream& stream) const = 0;
  virtual std::unique_ptr<RequestImpl> irecv(void* data, int64_t count, ElementType type,
                                             int source, int tag, const Stream& stream) const = 0;

  virtual void barrier() const = 0;

  // What the communicator spans, for messages ("world", "axis data", "axes fsdp+context"): set
  // by whoever creates it (the mesh names its groups).
  const std::string& label() const { return label_; }
  void set_label(std::string label) { label_ = std::move(label); }

 private:
  std::string label_ = "a split communicator";
};

}  // namespace maxctx

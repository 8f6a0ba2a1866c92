// The NCCL backend of Communicator: every verb over one NCCL communicator, on device memory of
// one GPU. One per mesh axis group whose ranks each drive their own GPU (NCCL refuses two ranks
// on one GPU: such groups stage through the host instead, mesh/device_collectives.h).
//
// Streams: every verb gets the CUDA stream it runs on (communicator_impl.h; the cuda backend's
// Kernels::stream()). The backend owns one non-blocking stream of its own, where all its NCCL
// operations go in the order they are issued, the same on every rank (one queue per NCCL
// communicator, so a ring's transfers and a collective never run concurrently on it); before each
// operation it records an event on the given stream and makes its own stream wait on it, so a
// transfer reads what the work before it wrote. Blocking verbs wait on the host for their stream
// before returning (the Communicator contract), so the work issued to the given stream after them
// sees their results. isend/irecv return at once:
// their transfers are issued together in one NCCL group when a request is first waited on (or
// before the next verb), NCCL matching a pair's messages in the order they are posted (tags are
// checked, never matched), so a ring's sends and receives cannot deadlock each other while the
// compute enqueued between the post and the wait overlaps them on the GPU.
//
// What it is not: a bootstrap of its own (the axis's MPI communicator broadcasts the unique id)
// or a host-memory backend (every buffer must be device memory of `device`: checked). bf16 bits
// (uint16_t) move but are never reduced (reduce bf16 as f32). A plain C++ header: nccl.h stays
// in the .cpp, built only with MAXCTX_CUDA.
#pragma once

#include "maxctx/mesh/communicator.h"

namespace maxctx {

// A communicator over `axis` (an MPI-backed communicator: a mesh group or a split of the world)
// on GPU `device` (made current here). Its NCCL communicator is made by its first verb that moves
// data, collectively over the axis (rank 0 makes the NCCL unique id, the axis broadcasts it,
// every rank joins): a communicator never used costs no NCCL state. The result has the axis's
// ranks, rank order and label.
Communicator make_nccl_communicator(const Communicator& axis, int device);

}  // namespace maxctx

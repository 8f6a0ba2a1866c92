// The cuda backend's stream seen from the host: synchronize, events, and host↔device copies that
// do not wait for the device (Kernels' time verbs, kernels.h). The stream is the legacy default
// stream every kernel of this folder runs on (ops.h). Plain C++ without CUDA types.
//
// Copies go through pinned staging buffers kept for the process and reused: an upload copies the
// caller's bytes into one and queues the device copy (the caller's buffer is free at return); a
// download queues the device copy into one and a host function that moves the bytes to the
// caller's buffer, and the event returned marks both. Copies larger than kMaxStagedBytes (model
// loads and checkpoints, not the step's index arrays and scalars) are plain synchronous copies:
// pinning that much host memory would cost more than the overlap it buys.
#pragma once

#include <cstddef>

#include "maxctx/core/stream.h"
#include "maxctx/kernels/event.h"

namespace maxctx::kernels::cuda {

inline constexpr size_t kMaxStagedBytes = size_t{8} << 20;

// The stream every op and copy of this backend is issued to, for the communicators' verbs on its
// memory (core/stream.h): the legacy default stream.
Stream compute_stream();
void synchronize_stream();
Event record_stream_event();
void copy_from_host_staged(void* device, const void* host, size_t bytes);
Event copy_to_host_staged(void* host, const void* device, size_t bytes);

}  // namespace maxctx::kernels::cuda

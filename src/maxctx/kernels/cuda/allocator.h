// Device memory for the CUDA backend: the Allocator of core/device.h over cudaMalloc, and the
// scratch buffers its ops reuse. Plain C++ (no CUDA types).
#pragma once

#include <cstddef>
#include <cstdint>

#include "maxctx/core/device.h"

namespace maxctx::kernels::cuda {

// cudaMalloc'd, zeroed memory of the current device (cudaMalloc aligns to 256 bytes, more than
// kBufferAlignment). Copies are synchronous cudaMemcpy calls on the legacy default stream, so
// they are ordered after every kernel launched before them.
const Allocator& cuda_allocator();

// Device memory held outside cuda_allocator()'s allocations (the scratch below, the flash
// attention's stream-ordered temporaries): `bytes` added to its committed count (negative: handed
// back), so that Allocator::committed_bytes is everything this rank holds on the device.
void count_outside_memory(int64_t bytes);

// Scratch an op uses within one call, grown to its largest use and kept: `slot` names the use,
// so that one op can hold several at once. Contents are undefined. The backend is driven from
// one host thread (one rank drives one GPU); all work is ordered on stream 0, so a buffer is
// never reused while a kernel still reads it.
enum class Scratch {
  kGemmA,
  kGemmB,
  kGemmOut,
  kWorkspace,
  kReduce,
  kSortKeys,
  kSortValues,
  kSortTemp,
  kSmall,
  kKeyBlockPartials,  // split-K decode attention's partial outs and lses
  kCount
};
void* scratch(Scratch slot, size_t bytes);

}  // namespace maxctx::kernels::cuda

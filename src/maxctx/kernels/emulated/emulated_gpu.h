// An emulated GPU for the tests: a backend that poses as CUDA in everything code above kernels/
// can see, and computes with the cpu backend, so a run on it equals the CPU run bit for bit.
//
// Its views say Device::kCuda and its allocator hands out *disguised* addresses: host memory
// with the top address bit set (kDisguiseBit), an address no x86-64 or AArch64 process can
// dereference, so any host read or write of its memory above kernels/ faults at once, as it
// would on a GPU whose memory the host cannot touch. copy_to_host/copy_from_host and every op
// take the bit off again; an op handed a plain host pointer (an index array left on the host) is
// a maxctx::Error naming the op, not a silent success.
//
// Its allocator (emulated_memory.h) counts committed bytes as a GPU's would, and faults on a
// touch of decommitted memory. What it is not: a GPU model. There are no streams and no memory
// limit; it checks placement and residency, not timing. The one asynchrony it keeps is the
// contract's: an asynchronous download reaches host memory only at the synchronize that
// guarantees it (late_downloads.h). Selected for tests only: hardware=gpu with
// MAXCTX_EMULATE_GPU=1 in the environment (cli/hardware.h reads it, once).
#pragma once

#include <cstdint>

#include "maxctx/kernels/kernels.h"

namespace maxctx::kernels::emulated {

inline constexpr uintptr_t kDisguiseBit = uintptr_t{1} << 63;

// The emulated GPU's op table (one per process).
const Kernels& emulated_gpu_kernels();

// Whether `memory` is a disguised address (the emulated GPU's memory); null is not.
bool is_disguised(const void* memory);
// The host address behind a disguised one; `what` names the caller for the error when `memory`
// is a plain host pointer. Null stays null.
void* host_address(const void* memory, const char* what);

}  // namespace maxctx::kernels::emulated

// The emulated GPU's memory (emulated_gpu.h): host memory behind disguised addresses, with a
// device's residency kept honest. Every allocation is its own anonymous mapping; the allocator
// counts the bytes committed (what a GPU would hold: allocate commits everything,
// allocate_reserved nothing, commit and decommit what they are given, by whole pages) and keeps
// the peak, and a decommitted page is made inaccessible (PROT_NONE), so an op that touches memory
// fsdp has handed back faults at once, as an unmapped page does on a GPU. On the host the same
// touch would silently read zeros.
#pragma once

#include "maxctx/core/device.h"

namespace maxctx::kernels::emulated {

const Allocator& emulated_allocator();

}  // namespace maxctx::kernels::emulated

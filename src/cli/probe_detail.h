// probe-hardware's detail tables (plan/hardware_profile.h): matmuls by size, attention by head
// size and the vector kernels a training step runs, each through the engine's own kernels.
#pragma once

#include <functional>

#include "maxctx/kernels/kernels.h"
#include "maxctx/mesh/communicator.h"
#include "maxctx/plan/hardware_profile.h"

namespace maxctx::cli {

// The mean time of `repeats` calls of `work` after one warm-up, the ranks starting together: a
// rate, as the ranks of a run reach it while all of them compute (ranks that share a core,
// such as 4 on 2 cores, each get their share; the fastest call would hide that).
double timed(const Communicator& world, int repeats, const std::function<void()>& work);
// The same for a kernel without collectives inside, with at least `repeats` calls and about
// 50 ms of them (the count agreed over the ranks before timing).
double timed_kernel(const Communicator& world, int repeats, const std::function<void()>& work);

// Fills profile.matmul_by_size, attention_by_head_dim and vector_rates.
void probe_detail(const kernels::Kernels& k, const Communicator& world,
                  plan::HardwareProfile& profile);

}  // namespace maxctx::cli

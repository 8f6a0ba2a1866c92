// The check that a run's allocations can fit the machine, made before they are attempted: a
// vocabulary of 2^30 or a KV cache of 2^40 tokens is refused with one line naming the sizes,
// instead of a std::bad_alloc (or the OOM killer) minutes later.
//
// The estimate passed in must be a lower bound of what the run allocates (the buffers it
// certainly holds at once), so a run that fits is never refused; the ranks on one machine share
// its memory, so the bound is multiplied by them.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace maxctx {

// Physical memory of this machine in bytes (sysconf: pages x page size).
int64_t physical_memory_bytes();

// Throws maxctx::Error when `bytes_per_rank` x the ranks of the busiest machine (at least
// ceil(world_size / num_nodes) of them) exceeds this machine's physical memory. `what` names the
// run ("training", "inference") and `detail` lists the sizes that make up the estimate, for the
// message. The estimate is a double: its inputs may be far beyond int64. Every rank computes the
// same verdict from the same config (machines of one job are assumed alike).
void check_fits_in_memory(double bytes_per_rank, int64_t world_size, int64_t num_nodes,
                          std::string_view what, std::string_view detail);

// "12.3 GiB", for messages.
std::string format_bytes(double bytes);

}  // namespace maxctx

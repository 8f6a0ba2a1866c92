// Splitting `total` items into `parts` near-equal contiguous blocks: the rule every sharded
// dimension follows (collectives' uneven parts, fsdp shards, inference row splits). Block p has
// total / parts items plus one for the first total % parts blocks; split_offset is where it
// starts. Plain arithmetic, in core/ so that any area can name a block without the mesh.
#pragma once

#include <cstdint>
#include <vector>

namespace maxctx {

int64_t split_count(int64_t total, int parts, int part);
int64_t split_offset(int64_t total, int parts, int part);
std::vector<int64_t> split_counts(int64_t total, int parts);
// The most items a block holds: total / parts rounded up.
inline int64_t ceil_div(int64_t total, int64_t parts) { return (total + parts - 1) / parts; }

}  // namespace maxctx

// AdamW's element update over fp32 arrays (the rule: train/optimizer.h), vectorised with
// Highway's static target (the build's baseline): std::sqrt's errno branch keeps the compiler
// from vectorising a plain loop, which then runs 5x slower (94 vs 19 ms for 16M parameters,
// the latter at DRAM speed). The tail goes through the same vector code via a padded copy, so
// every element sees the same operations wherever a range starts: an fsdp shard updates bit for
// bit like the whole.
#pragma once

#include <cstdint>

#include "maxctx/kernels/kernels.h"

namespace maxctx::kernels::cpu {

void adamw_update(float* params,       // (n)
                  const float* grads,  // (n)
                  float* mu,           // (n) first moment
                  float* nu,           // (n) second moment
                  int64_t n, const AdamWStep& step);

}  // namespace maxctx::kernels::cpu

// AdamW's element update (the rule: train/optimizer.h), vectorised with Highway (fp32 on the
// build's baseline target, bf16 mixes on the widest one): std::sqrt's errno branch keeps the
// compiler from vectorising a plain loop, which then runs 5x slower (94 vs 19 ms for 16M
// parameters, the latter at DRAM speed). The tail goes through the same vector code via a padded
// copy, so every element sees the same operations wherever a range starts: an fsdp shard updates
// bit for bit like the whole. params, grads, mu and nu may be f32 or bf16 each (FloatPtr): the
// update runs in fp32 on the widened values and rounds params and moments once (MaxText with
// weight_dtype=bfloat16 keeps weights and optimizer state in bf16).
#pragma once

#include <cstdint>

#include "maxctx/kernels/cpu/float_ptr.h"
#include "maxctx/kernels/kernels.h"

namespace maxctx::kernels::cpu {

void adamw_update(FloatPtr params,  // (n)
                  FloatPtr grads,   // (n)
                  FloatPtr mu,      // (n) first moment
                  FloatPtr nu,      // (n) second moment
                  int64_t n, const AdamWStep& step);

}  // namespace maxctx::kernels::cpu

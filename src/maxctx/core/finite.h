// Finiteness of loaded values: a weight file holding NaN or Inf (a corrupt download, a diverged
// run's checkpoint) would otherwise decode garbage or train on NaN with exit 0. One pass over
// the bits, after the read that already touched every byte, so it costs a fraction of the load.
#pragma once

#include <cstdint>
#include <optional>

#include "maxctx/core/tensor.h"

namespace maxctx {

// The index of the first NaN or ±Inf element of `values` (f32 or bf16; int8 is always finite),
// nullopt when there is none.
std::optional<int64_t> first_non_finite(const TensorView& values);

// The index of the first element of magnitude 2^exponent or more (NaN and Inf included; exponent
// in [-127, 128], 128: the non-finite only), nullopt when there is none. Legal but suspicious
// weights (issue #34 N15: 1e30 overflows the first matmul and decodes to nothing) are found
// with it, for a warning.
std::optional<int64_t> first_with_magnitude_at_least(const TensorView& values, int exponent);

}  // namespace maxctx

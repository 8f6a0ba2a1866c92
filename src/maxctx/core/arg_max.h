// The first arg max of a row of floats: what the accuracy metric asks of every logits row.
#pragma once

#include <cstdint>
#include <span>

namespace maxctx {

// The index of the first maximum, as std::max_element finds it (NaNs after the first element
// are passed over; a leading NaN is the answer), several times faster.
int64_t first_arg_max(std::span<const float> values);

}  // namespace maxctx

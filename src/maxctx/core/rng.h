// Counter-based random numbers (Philox4x32-10, Salmon et al. 2011).
//
// Every value is a pure function of (seed, stream, index): element i of a tensor initialised
// from stream s is the same number whichever rank computes it and whatever slice it computes.
// That is what lets a sharded run (fsdp, tensor, context) initialise exactly the bytes the
// single-device run has, so the two can be compared bit for bit. There is no hidden state.
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <string_view>

namespace maxctx::rng {

// One Philox4x32-10 block: 128 random bits from a 64-bit key and a 128-bit counter.
std::array<uint32_t, 4> philox4x32(uint64_t key, uint64_t counter_hi, uint64_t counter_lo);

// Streams separate independent uses of one seed (a weight tensor, a data stream, sampling).
// Derive one from a name so that adding a tensor does not shift the others.
uint64_t stream_id(std::string_view name);

uint32_t u32_at(uint64_t seed, uint64_t stream, uint64_t index);
// Uniform in [0, 1) with 24 random bits.
float uniform_at(uint64_t seed, uint64_t stream, uint64_t index);
// Standard normal (Box-Muller on the block's first two words).
float normal_at(uint64_t seed, uint64_t stream, uint64_t index);

// Fill out[i] with the value of element first_index + i.
void fill_uniform(std::span<float> out, uint64_t seed, uint64_t stream, uint64_t first_index,
                  float low, float high);
void fill_normal(std::span<float> out, uint64_t seed, uint64_t stream, uint64_t first_index,
                 float mean, float stddev);
// Integers uniform in [0, bound), bound > 0 (Lemire's multiply-shift; bias < 2^-32·bound).
void fill_uniform_int(std::span<int32_t> out, uint64_t seed, uint64_t stream, uint64_t first_index,
                      uint32_t bound);

}  // namespace maxctx::rng

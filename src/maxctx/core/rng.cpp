#include "maxctx/core/rng.h"

#include <cmath>
#include <numbers>

#include "maxctx/core/check.h"

namespace maxctx::rng {
namespace {

constexpr uint32_t kMul0 = 0xD2511F53u;
constexpr uint32_t kMul1 = 0xCD9E8D57u;
constexpr uint32_t kWeyl0 = 0x9E3779B9u;
constexpr uint32_t kWeyl1 = 0xBB67AE85u;

inline void mulhilo(uint32_t a, uint32_t b, uint32_t& hi, uint32_t& lo) {
  const uint64_t product = static_cast<uint64_t>(a) * b;
  hi = static_cast<uint32_t>(product >> 32);
  lo = static_cast<uint32_t>(product);
}

}  // namespace

std::array<uint32_t, 4> philox4x32(uint64_t key, uint64_t counter_hi, uint64_t counter_lo) {
  uint32_t c0 = static_cast<uint32_t>(counter_lo);
  uint32_t c1 = static_cast<uint32_t>(counter_lo >> 32);
  uint32_t c2 = static_cast<uint32_t>(counter_hi);
  uint32_t c3 = static_cast<uint32_t>(counter_hi >> 32);
  uint32_t k0 = static_cast<uint32_t>(key);
  uint32_t k1 = static_cast<uint32_t>(key >> 32);
  for (int round = 0; round < 10; ++round) {
    uint32_t hi0, lo0, hi1, lo1;
    mulhilo(kMul0, c0, hi0, lo0);
    mulhilo(kMul1, c2, hi1, lo1);
    const uint32_t n0 = hi1 ^ c1 ^ k0;
    const uint32_t n1 = lo1;
    const uint32_t n2 = hi0 ^ c3 ^ k1;
    const uint32_t n3 = lo0;
    c0 = n0;
    c1 = n1;
    c2 = n2;
    c3 = n3;
    k0 += kWeyl0;
    k1 += kWeyl1;
  }
  return {c0, c1, c2, c3};
}

uint64_t stream_id(std::string_view name) {
  uint64_t hash = 0xcbf29ce484222325ull;  // FNV-1a, stable across platforms and builds
  for (char c : name) {
    hash ^= static_cast<unsigned char>(c);
    hash *= 0x100000001b3ull;
  }
  return hash;
}

uint32_t u32_at(uint64_t seed, uint64_t stream, uint64_t index) {
  return philox4x32(seed, stream, index)[0];
}

float uniform_at(uint64_t seed, uint64_t stream, uint64_t index) {
  return static_cast<float>(u32_at(seed, stream, index) >> 8) * 0x1.0p-24f;
}

float normal_at(uint64_t seed, uint64_t stream, uint64_t index) {
  const auto bits = philox4x32(seed, stream, index);
  // u1 in (0, 1] so the log is finite; u2 in [0, 1). Computed in double: the float result is
  // then the same on every rank and every compiler that follows IEEE.
  const double u1 = (static_cast<double>(bits[0] >> 8) + 1.0) * 0x1.0p-24;
  const double u2 = static_cast<double>(bits[1] >> 8) * 0x1.0p-24;
  return static_cast<float>(std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * std::numbers::pi * u2));
}

void fill_uniform(std::span<float> out, uint64_t seed, uint64_t stream, uint64_t first_index,
                  float low, float high) {
  for (size_t i = 0; i < out.size(); ++i) {
    out[i] = low + (high - low) * uniform_at(seed, stream, first_index + i);
  }
}

void fill_normal(std::span<float> out, uint64_t seed, uint64_t stream, uint64_t first_index,
                 float mean, float stddev) {
  for (size_t i = 0; i < out.size(); ++i) {
    out[i] = mean + stddev * normal_at(seed, stream, first_index + i);
  }
}

void fill_uniform_int(std::span<int32_t> out, uint64_t seed, uint64_t stream, uint64_t first_index,
                      uint32_t bound) {
  MAXCTX_CHECK_GT(bound, 0u, "integer range must be non-empty");
  for (size_t i = 0; i < out.size(); ++i) {
    const uint64_t r = u32_at(seed, stream, first_index + i);
    out[i] = static_cast<int32_t>((r * bound) >> 32);
  }
}

}  // namespace maxctx::rng

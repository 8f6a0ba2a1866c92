// Fast RoPE. The tables cost two double-precision libm calls per (token, frequency) and are
// built once per batch; the rotation itself is two FMAs per element over vectors of the half
// head, with cos/sin loaded once per token and reused by all its heads.
#include "maxctx/kernels/cpu/rope.h"

#include <cmath>
#include <vector>

#include "maxctx/core/check.h"
#include "maxctx/kernels/cpu/threading.h"

#ifndef HWY_WANT_AVX3_DL
#define HWY_WANT_AVX3_DL  // Highway 1.0.3 workaround, see elementwise.cpp
#endif
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "maxctx/kernels/cpu/rope.cpp"
// foreach_target.h must precede highway.h and the -inl.h headers.
// clang-format off
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
#include "maxctx/kernels/cpu/float_storage-inl.h"
// clang-format on

HWY_BEFORE_NAMESPACE();
namespace maxctx::kernels::cpu {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// Rotates `rows` tokens by +angle (inverse = false) or −angle (inverse = true). Each pair is
// loaded before it is stored, so out may be in.
struct RopeRotateKernel {
  const float* cos;
  const float* sin;
  int64_t rows, H, head_dim;
  bool inverse;
  template <class TO, class TI>
  void operator()(TO* out, const TI* in) const {
    const hn::ScalableTag<float> d;
    const int64_t lanes = hn::Lanes(d);
    const int64_t half = head_dim / 2;
    for (int64_t n = 0; n < rows; ++n) {
      const float* c_row = cos + n * half;
      const float* s_row = sin + n * half;
      for (int64_t h = 0; h < H; ++h) {
        const TI* x = in + (n * H + h) * head_dim;
        TO* y = out + (n * H + h) * head_dim;
        int64_t i = 0;
        for (; i + lanes <= half; i += lanes) {
          const auto c = hn::LoadU(d, c_row + i);
          const auto s = inverse ? hn::Neg(hn::LoadU(d, s_row + i)) : hn::LoadU(d, s_row + i);
          const auto x1 = LoadF32(d, x + i);
          const auto x2 = LoadF32(d, x + half + i);
          StoreRounded(d, hn::NegMulAdd(x2, s, hn::Mul(x1, c)), y + i);
          StoreRounded(d, hn::MulAdd(x1, s, hn::Mul(x2, c)), y + half + i);
        }
        for (; i < half; ++i) {
          const float c = c_row[i];
          const float s = inverse ? -s_row[i] : s_row[i];
          const float x1 = ToF32(x[i]);
          const float x2 = ToF32(x[half + i]);
          StoreRounded(x1 * c - x2 * s, y + i);
          StoreRounded(x2 * c + x1 * s, y + half + i);
        }
      }
    }
  }
};

void RopeRotateTokens(FloatPtr out, FloatPtr in, const float* cos, const float* sin, int64_t rows,
                      int64_t H, int64_t head_dim, bool inverse) {
  const FloatPtr ptrs[] = {out, in};
  DispatchStorage<2>(RopeRotateKernel{cos, sin, rows, H, head_dim, inverse}, ptrs);
}

}  // namespace HWY_NAMESPACE
}  // namespace maxctx::kernels::cpu
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace maxctx::kernels::cpu {

HWY_EXPORT(RopeRotateTokens);

void rope_cos_sin(float* cos, float* sin, const int32_t* positions, int64_t N, int64_t head_dim,
                  const RopeParams& params) {
  const std::vector<double> inv_freq = rope_inv_freq(params, head_dim);
  const int64_t half = head_dim / 2;
  // A double (cos, sin) pair costs ~18 ns here: a few tokens per task already pay for a fork.
  parallel_for(N, items_per_task(32 * half), [&](int64_t begin, int64_t end) {
    for (int64_t n = begin; n < end; ++n) {
      for (int64_t i = 0; i < half; ++i) {
        const double angle = double(positions[n]) * inv_freq[i];
        cos[n * half + i] = float(std::cos(angle));
        sin[n * half + i] = float(std::sin(angle));
      }
    }
  });
}

void rope_forward(FloatPtr out, FloatPtr in, const float* cos, const float* sin, int64_t N,
                  int64_t H, int64_t head_dim) {
  auto& rope_rotate_tokens = HWY_DYNAMIC_DISPATCH(RopeRotateTokens);
  MAXCTX_CHECK(head_dim > 0 && head_dim % 2 == 0, "rope needs an even head_dim > 0, got {}",
               head_dim);
  const int64_t half = head_dim / 2;
  parallel_for(N, items_per_task(H * head_dim), [&](int64_t begin, int64_t end) {
    rope_rotate_tokens(out + begin * H * head_dim, in + begin * H * head_dim, cos + begin * half,
                       sin + begin * half, end - begin, H, head_dim, false);
  });
}

void rope_backward(FloatPtr d_in, FloatPtr d_out, const float* cos, const float* sin, int64_t N,
                   int64_t H, int64_t head_dim) {
  auto& rope_rotate_tokens = HWY_DYNAMIC_DISPATCH(RopeRotateTokens);
  MAXCTX_CHECK(head_dim > 0 && head_dim % 2 == 0, "rope needs an even head_dim > 0, got {}",
               head_dim);
  const int64_t half = head_dim / 2;
  parallel_for(N, items_per_task(H * head_dim), [&](int64_t begin, int64_t end) {
    rope_rotate_tokens(d_in + begin * H * head_dim, d_out + begin * H * head_dim,
                       cos + begin * half, sin + begin * half, end - begin, H, head_dim, true);
  });
}

}  // namespace maxctx::kernels::cpu
#endif  // HWY_ONCE

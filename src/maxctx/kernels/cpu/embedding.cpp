// Fast token embedding. The forward copies rows (converting when the dtypes differ). The backward's
// column blocks turn a scatter-add with collisions into independent, ordered row-segment adds
// (Highway), one block per task.
#include "maxctx/kernels/cpu/embedding.h"

#include "maxctx/kernels/cpu/elementwise.h"
#include "maxctx/kernels/cpu/threading.h"
#include "maxctx/kernels/view_checks.h"

#ifndef HWY_WANT_AVX3_DL
#define HWY_WANT_AVX3_DL  // Highway 1.0.3 workaround, see elementwise.cpp
#endif
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "maxctx/kernels/cpu/embedding.cpp"
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

// d_table[tokens[n], c0:c1) += d_out[n, c0:c1) for every n, in order.
struct EmbeddingBackwardKernel {
  float* d_table;
  const int32_t* tokens;
  int64_t N, D, c0, c1;
  template <class T>
  void operator()(const T* d_out) const {
    const hn::ScalableTag<float> d;
    const int64_t lanes = hn::Lanes(d);
    for (int64_t n = 0; n < N; ++n) {
      float* dst = d_table + int64_t{tokens[n]} * D;
      const T* src = d_out + n * D;
      int64_t c = c0;
      for (; c + lanes <= c1; c += lanes) {
        hn::StoreU(hn::Add(hn::LoadU(d, dst + c), LoadF32(d, src + c)), d, dst + c);
      }
      for (; c < c1; ++c) dst[c] += ToF32(src[c]);
    }
  }
};

void EmbeddingBackwardColumns(float* d_table, FloatPtr d_out, const int32_t* tokens, int64_t N,
                              int64_t D, int64_t c0, int64_t c1) {
  DispatchStorage<1>(EmbeddingBackwardKernel{d_table, tokens, N, D, c0, c1}, &d_out);
}

}  // namespace HWY_NAMESPACE
}  // namespace maxctx::kernels::cpu
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace maxctx::kernels::cpu {

HWY_EXPORT(EmbeddingBackwardColumns);

namespace {
constexpr int64_t kColumnBlock = 256;  // a multiple of every vector width
}  // namespace

void embedding_forward(FloatPtr out, const int32_t* tokens, FloatPtr table, int64_t N, int64_t D,
                       int64_t V) {
  check_token_ids(tokens, N, V);
  parallel_for(N, items_per_task(D), [&](int64_t begin, int64_t end) {
    for (int64_t n = begin; n < end; ++n) {
      convert_serial(out + n * D, table + int64_t{tokens[n]} * D, D);
    }
  });
}

void embedding_backward(float* d_table, FloatPtr d_out, const int32_t* tokens, int64_t N, int64_t D,
                        int64_t V) {
  auto& embedding_backward_columns = HWY_DYNAMIC_DISPATCH(EmbeddingBackwardColumns);
  check_token_ids(tokens, N, V);
  const int64_t blocks = (D + kColumnBlock - 1) / kColumnBlock;
  parallel_for(blocks, items_per_task(N * kColumnBlock), [&](int64_t begin, int64_t end) {
    embedding_backward_columns(d_table, d_out, tokens, N, D, begin * kColumnBlock,
                               std::min(D, end * kColumnBlock));
  });
}

}  // namespace maxctx::kernels::cpu
#endif  // HWY_ONCE

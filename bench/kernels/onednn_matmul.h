// oneDNN's bf16 matmul primitive, for kernels_bench's side-by-side figures only: C (m×n, f32) =
// op(A) · op(B), A and B bf16 row-major with sgemm's transposes. oneDNN is optional
// (MAXCTX_WITH_ONEDNN, found if installed: Debian's libdnnl-dev 2.6.3); without it the
// benchmark reports null.
#pragma once

#include <cstdint>
#include <functional>

#include "maxctx/core/dtype.h"

namespace maxctx::bench {

bool onednn_available();
// A callable that runs the product once (primitive created beforehand), or an empty function
// without oneDNN.
std::function<void()> onednn_bf16_matmul(int64_t m, int64_t n, int64_t k, bool trans_a,
                                         bool trans_b, const bf16* a, const bf16* b, float* c);

}  // namespace maxctx::bench

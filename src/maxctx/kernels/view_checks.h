// The shape checks every backend's op table makes on its views before calling a kernel: the
// element counts against the dims an op reads (kernels.h), with one message for each; and the
// id range checks of the index arrays. Shared by
// the cpu and cuda backends so that a bad call reads the same whichever backend it reaches.
#pragma once

#include <cstdint>

#include "maxctx/core/tensor.h"
#include "maxctx/kernels/types.h"

namespace maxctx::kernels {

// An output that may be exactly an input (in place) must then have the input's dtype.
void check_same_dtype_in_place(const TensorView& out, const TensorView& in, const char* op);

// The number of rows of a view holding rows of `row_elements` elements.
int64_t rows_of(const TensorView& v, int64_t row_elements);

void check_numel(const TensorView& v, int64_t numel, const char* what);

// (out_dim, in_dim) of a weight matrix view.
struct MatrixDims {
  int64_t out_dim, in_dim;
};
MatrixDims matrix_dims(const TensorView& weight);

// out, q (B, Sq, Hq, D), lse (B, Hq, Sq), k, v (B, Sk, Hkv, D) by their element counts.
void check_attention_views(const TensorView& out, const TensorView& lse, const TensorView& q,
                           const TensorView& k, const TensorView& v, const AttentionParams& p);

// A device backend's attention kernels load bf16 q, k, v rows in 16-byte vectors of 8 elements
// (cuda/flash_forward_mma.cu) wherever head_dim makes a row whole vectors: such views must start
// on a 16-byte boundary, or the load faults (or reads the wrong bytes) on the GPU. Checked before
// any launch by every device backend, the emulated GPU included, never by the cpu backend (whose
// loads have no such rule). A misaligned view is one line naming the op, the view and the offset.
inline constexpr uintptr_t kDeviceVectorBytes = 16;
void check_attention_alignment(const TensorView& q, const TensorView& k, const TensorView& v,
                               const AttentionParams& p, const char* op);

// The readout ops (kernel_ops.inc): their result array, never null; and their logits (N, V),
// rank 2 with V > 0 (an arg max needs a value), with the per-row id array they read or write
// (targets, ids) present when N > 0.
double* checked_readout(double* out, const char* op);
struct LogitRows {
  int64_t rows, vocab;
};
LogitRows readout_logits(const TensorView& logits, const int32_t* row_ids, const char* op);

// Token ids in [0, V), and targets in [0, V) on every row of weight ≠ 0 (the reference's
// messages), checked by the cpu backend in its ops. A device backend's ops do not check (that
// would read the device back on each call): the host checks ids where it reads them, before any
// upload (the token file's scan in train/data_tokens.cpp, synthetic and recall data by
// construction, the engine's prompt and decode-token checks).
void check_token_ids(const int32_t* tokens, int64_t N, int64_t V);
void check_target_ids(const int32_t* targets, const float* weights, int64_t N, int64_t V);

}  // namespace maxctx::kernels

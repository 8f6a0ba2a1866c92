#include "maxctx/kernels/view_checks.h"

#include <utility>

#include "maxctx/core/check.h"

namespace maxctx::kernels {

// An output that may be exactly an input (in place) must then have the input's dtype.
void check_same_dtype_in_place(const TensorView& out, const TensorView& in, const char* op) {
  MAXCTX_CHECK(out.raw() != in.raw() || out.dtype() == in.dtype(),
               "{} in place needs one dtype, got {} over {}", op, dtype_name(out.dtype()),
               dtype_name(in.dtype()));
}

// The number of rows of a view holding rows of `row_elements` elements.
int64_t rows_of(const TensorView& v, int64_t row_elements) {
  MAXCTX_CHECK(row_elements > 0 && v.numel() % row_elements == 0,
               "a tensor of shape {} is not made of rows of {} elements", v.shape().to_string(),
               row_elements);
  return v.numel() / row_elements;
}

void check_numel(const TensorView& v, int64_t numel, const char* what) {
  MAXCTX_CHECK_EQ(v.numel(), numel, "{} has the wrong element count (shape {})", what,
                  v.shape().to_string());
}

MatrixDims matrix_dims(const TensorView& weight) {
  MAXCTX_CHECK_EQ(weight.shape().rank(), 2, "a weight matrix is (out_dim, in_dim), got shape {}",
                  weight.shape().to_string());
  return {weight.shape()[0], weight.shape()[1]};
}

void check_attention_views(const TensorView& out, const TensorView& lse, const TensorView& q,
                           const TensorView& k, const TensorView& v, const AttentionParams& p) {
  const int64_t q_numel = p.batch * p.seq_q * p.heads_q * p.head_dim;
  const int64_t kv_numel = p.batch * p.seq_k * p.heads_kv * p.head_dim;
  check_numel(q, q_numel, "attention q");
  check_numel(out, q_numel, "attention out");
  check_numel(lse, p.batch * p.heads_q * p.seq_q, "attention lse");
  check_numel(k, kv_numel, "attention k");
  check_numel(v, kv_numel, "attention v");
}

void check_attention_alignment(const TensorView& q, const TensorView& k, const TensorView& v,
                               const AttentionParams& p, const char* op) {
  constexpr int64_t kBf16PerVector = kDeviceVectorBytes / sizeof(uint16_t);
  if (q.dtype() != DType::kBF16 || p.head_dim % kBf16PerVector != 0) return;
  for (const auto& [view, name] : {std::pair{&q, "q"}, std::pair{&k, "k"}, std::pair{&v, "v"}}) {
    const uintptr_t offset = reinterpret_cast<uintptr_t>(view->raw()) % kDeviceVectorBytes;
    MAXCTX_CHECK(offset == 0,
                 "{}: the bf16 view {} starts {} bytes past a 16-byte boundary; device attention "
                 "loads q, k, v in 16-byte vectors, so their views must start on one",
                 op, name, offset);
  }
}

double* checked_readout(double* out, const char* op) {
  MAXCTX_CHECK(out != nullptr, "{} was given no result array", op);
  return out;
}

LogitRows readout_logits(const TensorView& logits, const int32_t* row_ids, const char* op) {
  MAXCTX_CHECK_EQ(logits.shape().rank(), 2, "{} takes (N, V) logits", op);
  const LogitRows dims{logits.shape()[0], logits.shape()[1]};
  MAXCTX_CHECK(dims.vocab > 0, "{}: logits with no vocabulary", op);
  MAXCTX_CHECK(dims.rows == 0 || row_ids != nullptr, "{}: {} rows and no id array", op, dims.rows);
  return dims;
}

void check_token_ids(const int32_t* tokens, int64_t N, int64_t V) {
  for (int64_t n = 0; n < N; ++n) {
    MAXCTX_CHECK(tokens[n] >= 0 && tokens[n] < V,
                 "token id {} at row {} is out of range: allowed 0 <= id < vocab_size {}",
                 tokens[n], n, V);
  }
}

void check_target_ids(const int32_t* targets, const float* weights, int64_t N, int64_t V) {
  MAXCTX_CHECK_GT(V, 0, "the vocabulary must not be empty");
  for (int64_t n = 0; n < N; ++n) {
    if (weights[n] == 0.0f) continue;
    MAXCTX_CHECK(targets[n] >= 0 && targets[n] < V,
                 "target id {} at row {} (weight {}) is out of range: allowed 0 <= id < "
                 "vocab_size {}, or weight 0 to mask the row",
                 targets[n], n, weights[n], V);
  }
}

}  // namespace maxctx::kernels

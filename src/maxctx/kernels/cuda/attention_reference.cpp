// The plain device attention's entry points: the views' dtypes checked, the kernels of
// attention_reference.cu launched (attention_reference.h says what and why).
#if MAXCTX_HAVE_CUDA
#include "maxctx/kernels/cuda/attention_reference.h"

#include "maxctx/core/check.h"
#include "maxctx/kernels/cuda/ops.h"

namespace maxctx::kernels::cuda {
namespace {

AttentionDims dims_of(const AttentionParams& p) {
  check_attention_params(p);
  MAXCTX_CHECK(p.head_dim <= kMaxHeadDim,
               "the cuda reference attention takes head_dim <= {}, got {}", kMaxHeadDim,
               p.head_dim);
  return AttentionDims{
      p.batch,         p.seq_q,    p.seq_k,        p.heads_q,
      p.heads_kv,      p.head_dim, p.group_size(), static_cast<float>(p.softmax_scale()),
      p.sliding_window};
}

bool is_float(const TensorView& view) {
  return view.dtype() == DType::kF32 || view.dtype() == DType::kBF16;
}
DeviceFloats floats(const TensorView& view, const char* op, const char* what) {
  MAXCTX_CHECK(is_float(view), "{}: {} must be f32 or bf16, got {}", op, what,
               dtype_name(view.dtype()));
  return {view.raw(), view.dtype() == DType::kBF16};
}
float* f32(const TensorView& view, const char* op, const char* what) {
  MAXCTX_CHECK(view.dtype() == DType::kF32, "{}: {} must be f32, got {}", op, what,
               dtype_name(view.dtype()));
  return static_cast<float*>(view.raw());
}
// q, k, v share one dtype, which decides the products.
bool bf16_products(const TensorView& q, const TensorView& k, const TensorView& v, const char* op) {
  MAXCTX_CHECK(is_float(q) && k.dtype() == q.dtype() && v.dtype() == q.dtype(),
               "{}: q, k and v share one dtype (f32 or bf16), got q {}, k {}, v {}", op,
               dtype_name(q.dtype()), dtype_name(k.dtype()), dtype_name(v.dtype()));
  return q.dtype() == DType::kBF16;
}
KvRows kv_rows(const TensorView& view) { return {view.raw(), view.dtype(), nullptr}; }

// The reference's 1×1 tiles, per kv head, as kernels/ref/attention.cpp counts them.
void count_pairs(const AttentionMasks& masks, const AttentionDims& d, AttentionStats* stats) {
  if (stats == nullptr) return;
  const int64_t pairs = d.batch * d.seq_q * d.seq_k;
  const int64_t seen = count_visible_pairs(masks, d);
  stats->blocks_computed += seen * d.heads_kv;
  stats->blocks_skipped += (pairs - seen) * d.heads_kv;
}

}  // namespace

void attention_forward_reference(TensorView out, TensorView lse, TensorView q, TensorView k,
                                 TensorView v, const int32_t* q_pos, const int32_t* q_seg,
                                 const int32_t* k_pos, const int32_t* k_seg,
                                 const AttentionParams& params, AttentionStats* stats) {
  constexpr const char* kOp = "attention_forward";
  const AttentionDims d = dims_of(params);
  const bool bf16 = bf16_products(q, k, v, kOp);
  const AttentionMasks masks{q_pos, q_seg, k_pos, k_seg};
  count_pairs(masks, d, stats);
  attention_forward_rows(floats(out, kOp, "out"), f32(lse, kOp, "lse"), floats(q, kOp, "q"),
                         kv_rows(k), kv_rows(v), masks, d, bf16);
}

void attention_backward_reference(TensorView dq, TensorView dk, TensorView dv, TensorView d_out,
                                  TensorView out, TensorView lse, TensorView q, TensorView k,
                                  TensorView v, const int32_t* q_pos, const int32_t* q_seg,
                                  const int32_t* k_pos, const int32_t* k_seg,
                                  const AttentionParams& params, AttentionStats* stats) {
  constexpr const char* kOp = "attention_backward";
  const AttentionDims d = dims_of(params);
  const bool bf16 = bf16_products(q, k, v, kOp);
  const AttentionMasks masks{q_pos, q_seg, k_pos, k_seg};
  count_pairs(masks, d, stats);
  attention_backward_rows(f32(dq, kOp, "dq"), f32(dk, kOp, "dk"), f32(dv, kOp, "dv"),
                          floats(d_out, kOp, "d_out"), floats(out, kOp, "out"),
                          f32(lse, kOp, "lse"), floats(q, kOp, "q"), kv_rows(k), kv_rows(v), masks,
                          d, bf16);
}

void single_query_attention_reference(TensorView out, TensorView lse, TensorView q, TensorView k,
                                      TensorView k_scale, TensorView v, TensorView v_scale,
                                      const int32_t* q_pos, const int32_t* q_seg,
                                      const int32_t* k_pos, const int32_t* k_seg,
                                      const AttentionParams& params) {
  constexpr const char* kOp = "single_query_attention";
  const AttentionDims d = dims_of(params);
  MAXCTX_CHECK(v.dtype() == k.dtype(), "{}: k and v are one cache, got k {} and v {}", kOp,
               dtype_name(k.dtype()), dtype_name(v.dtype()));
  KvRows kr = kv_rows(k), vr = kv_rows(v);
  if (k.dtype() == DType::kI8) {
    kr.row_scale = f32(k_scale, kOp, "k_scale");
    vr.row_scale = f32(v_scale, kOp, "v_scale");
  } else {
    floats(k, kOp, "the cache");
  }
  single_query_attention_rows(floats(out, kOp, "out"), f32(lse, kOp, "lse"), floats(q, kOp, "q"),
                              kr, vr, AttentionMasks{q_pos, q_seg, k_pos, k_seg}, d);
}

}  // namespace maxctx::kernels::cuda
#endif  // MAXCTX_HAVE_CUDA

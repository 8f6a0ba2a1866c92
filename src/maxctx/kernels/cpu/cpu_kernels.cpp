#include "maxctx/kernels/cpu/cpu_kernels.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "maxctx/core/check.h"
#include "maxctx/kernels/cpu/adamw.h"
#include "maxctx/kernels/cpu/attention.h"
#include "maxctx/kernels/cpu/cross_entropy.h"
#include "maxctx/kernels/cpu/elementwise.h"
#include "maxctx/kernels/cpu/embedding.h"
#include "maxctx/kernels/cpu/int8.h"
#include "maxctx/kernels/cpu/matmul.h"
#include "maxctx/kernels/cpu/readouts.h"
#include "maxctx/kernels/cpu/rmsnorm.h"
#include "maxctx/kernels/cpu/rope.h"
#include "maxctx/kernels/cpu/single_query_attention.h"
#include "maxctx/kernels/cpu/swiglu.h"
#include "maxctx/kernels/view_checks.h"

namespace maxctx::kernels::cpu {
namespace {

void check_host(const TensorView& v) {
  MAXCTX_CHECK(v.device() == Device::kCpu, "the cpu backend was given a {} tensor",
               device_name(v.device()));
}

template <typename T>
T* as(const TensorView& v) {
  check_host(v);
  MAXCTX_CHECK(v.dtype() == dtype_of<T>(), "the cpu backend's op takes {}, got a {} tensor",
               dtype_name(dtype_of<T>()), dtype_name(v.dtype()));
  return static_cast<T*>(v.raw());
}
float* f32(const TensorView& v) { return as<float>(v); }

// A "float" view of kernels.h's precision contract: f32 or bf16, each view its own.
void check_float(const TensorView& v, const char* op) {
  check_host(v);
  MAXCTX_CHECK(v.dtype() == DType::kF32 || v.dtype() == DType::kBF16,
               "the cpu backend's {} takes f32 or bf16 tensors, got a {} tensor", op,
               dtype_name(v.dtype()));
}

// A float operand of `op`, for the row and elementwise kernels.
FloatPtr floats(const TensorView& v, const char* op) {
  check_float(v, op);
  if (v.dtype() == DType::kBF16) return FloatPtr(static_cast<const bf16*>(v.raw()));
  return FloatPtr(static_cast<const float*>(v.raw()));
}
// An operand of `op` that is f32 whatever the others are: statistics, parameter gradients.
float* f32(const TensorView& v, const char* op, const char* what) {
  check_host(v);
  MAXCTX_CHECK(v.dtype() == DType::kF32, "the cpu backend's {} takes {} as f32, got a {} tensor",
               op, what, dtype_name(v.dtype()));
  return static_cast<float*>(v.raw());
}

// A float view's elements as f32: its own memory, or a widened copy in staging.
const float* f32_input(const TensorView& v, std::vector<float>& staging, const char* op) {
  check_float(v, op);
  if (v.dtype() == DType::kF32) return static_cast<const float*>(v.raw());
  staging.resize(static_cast<size_t>(v.numel()));
  convert_bf16_to_f32(v.span<bf16>(), staging);
  return staging.data();
}

// Where an op writes a float view's f32 result: its own memory, or staging that
// finish_f32_output then rounds into it.
float* f32_output(const TensorView& v, std::vector<float>& staging, const char* op) {
  check_float(v, op);
  if (v.dtype() == DType::kF32) return static_cast<float*>(v.raw());
  staging.assign(static_cast<size_t>(v.numel()), 0.0f);
  return staging.data();
}
void finish_f32_output(const TensorView& v, const std::vector<float>& staging) {
  if (v.dtype() == DType::kBF16) convert_f32_to_bf16(staging, v.span<bf16>());
}

// The dtype q, k and v share, which decides an attention op's products.
DType attention_dtype(const TensorView& q, const TensorView& k, const TensorView& v,
                      const char* op) {
  check_float(q, op);
  MAXCTX_CHECK(k.dtype() == q.dtype() && v.dtype() == q.dtype(),
               "{}: q, k and v share one dtype (f32 or bf16), got q {}, k {}, v {}", op,
               dtype_name(q.dtype()), dtype_name(k.dtype()), dtype_name(v.dtype()));
  return q.dtype();
}

// A float operand of `op` as gemm_bf16 takes it (kernels/cpu/gemm_bf16.h).
Floats gemm_floats(const TensorView& v, const char* op) {
  check_float(v, op);
  return {v.raw(), v.dtype()};
}
ConstFloats const_floats(const TensorView& v, const char* op) {
  check_float(v, op);
  return {v.raw(), v.dtype()};
}

class CpuKernels final : public Kernels {
 public:
  const char* name() const override { return "cpu"; }
  Device device() const override { return Device::kCpu; }
  const Allocator& allocator() const override { return host_allocator(); }

  void matmul_forward(TensorView out, TensorView in, TensorView weight) const override {
    const auto [out_dim, in_dim] = matrix_dims(weight);
    const int64_t N = rows_of(in, in_dim);
    check_numel(out, N * out_dim, "matmul output");
    cpu::matmul_forward(gemm_floats(out, "matmul_forward"), const_floats(in, "matmul_forward"),
                        const_floats(weight, "matmul_forward"), N, in_dim, out_dim);
  }
  void matmul_backward(TensorView d_in, TensorView d_weight, TensorView d_out, TensorView in,
                       TensorView weight) const override {
    matmul_backward_with(&cpu::matmul_backward, d_in, d_weight, d_out, in, weight);
  }
  void matmul_backward_accumulate_input(TensorView d_in, TensorView d_weight, TensorView d_out,
                                        TensorView in, TensorView weight) const override {
    matmul_backward_with(&cpu::matmul_backward_accumulate_input, d_in, d_weight, d_out, in, weight);
  }
  void embedding_forward(TensorView out, const int32_t* tokens, TensorView table) const override {
    const auto [V, E] = matrix_dims(table);
    constexpr const char* kOp = "embedding_forward";
    cpu::embedding_forward(floats(out, kOp), tokens, floats(table, kOp), rows_of(out, E), E, V);
  }
  void embedding_backward(TensorView d_table, TensorView d_out,
                          const int32_t* tokens) const override {
    const auto [V, E] = matrix_dims(d_table);
    constexpr const char* kOp = "embedding_backward";
    cpu::embedding_backward(f32(d_table, kOp, "d_table"), floats(d_out, kOp), tokens,
                            rows_of(d_out, E), E, V);
  }
  void rmsnorm_forward(TensorView out, TensorView rstd, TensorView in, TensorView weight,
                       float eps) const override {
    const int64_t D = weight.numel();
    const int64_t N = rows_of(in, D);
    check_numel(out, N * D, "rmsnorm output");
    check_numel(rstd, N, "rmsnorm rstd");
    constexpr const char* kOp = "rmsnorm_forward";
    cpu::rmsnorm_forward(floats(out, kOp), f32(rstd, kOp, "rstd"), floats(in, kOp),
                         floats(weight, kOp), N, D, eps);
  }
  void rmsnorm_backward(TensorView d_in, TensorView d_weight, TensorView d_out, TensorView in,
                        TensorView weight, TensorView rstd) const override {
    const int64_t D = weight.numel();
    const int64_t N = rows_of(in, D);
    check_numel(d_in, N * D, "rmsnorm d_in");
    check_numel(d_out, N * D, "rmsnorm d_out");
    check_numel(d_weight, D, "rmsnorm d_weight");
    check_numel(rstd, N, "rmsnorm rstd");
    constexpr const char* kOp = "rmsnorm_backward";
    cpu::rmsnorm_backward(floats(d_in, kOp), f32(d_weight, kOp, "d_weight"), floats(d_out, kOp),
                          floats(in, kOp), floats(weight, kOp), f32(rstd, kOp, "rstd"), N, D);
  }
  void rope_cos_sin(TensorView cos, TensorView sin, const int32_t* positions,
                    const RopeParams& params) const override {
    const auto [N, half] = matrix_dims(cos);
    check_numel(sin, N * half, "rope sin");
    cpu::rope_cos_sin(f32(cos), f32(sin), positions, N, 2 * half, params);
  }
  void rope_forward(TensorView out, TensorView in, TensorView cos, TensorView sin) const override {
    const auto [N, half] = matrix_dims(cos);
    const int64_t heads = rows_of(in, N * 2 * half);
    check_numel(out, in.numel(), "rope output");
    constexpr const char* kOp = "rope_forward";
    check_same_dtype_in_place(out, in, kOp);
    cpu::rope_forward(floats(out, kOp), floats(in, kOp), f32(cos, kOp, "cos"), f32(sin, kOp, "sin"),
                      N, heads, 2 * half);
  }
  void rope_backward(TensorView d_in, TensorView d_out, TensorView cos,
                     TensorView sin) const override {
    const auto [N, half] = matrix_dims(cos);
    const int64_t heads = rows_of(d_out, N * 2 * half);
    check_numel(d_in, d_out.numel(), "rope d_in");
    constexpr const char* kOp = "rope_backward";
    check_same_dtype_in_place(d_in, d_out, kOp);
    cpu::rope_backward(floats(d_in, kOp), floats(d_out, kOp), f32(cos, kOp, "cos"),
                       f32(sin, kOp, "sin"), N, heads, 2 * half);
  }
  void swiglu_forward(TensorView out, TensorView gate, TensorView up) const override {
    const auto [N, F] = matrix_dims(gate);
    check_numel(up, N * F, "swiglu up");
    check_numel(out, N * F, "swiglu output");
    constexpr const char* kOp = "swiglu_forward";
    check_same_dtype_in_place(out, gate, kOp);
    check_same_dtype_in_place(out, up, kOp);
    cpu::swiglu_forward(floats(out, kOp), floats(gate, kOp), floats(up, kOp), N, F);
  }
  void swiglu_backward(TensorView d_gate, TensorView d_up, TensorView d_out, TensorView gate,
                       TensorView up) const override {
    const auto [N, F] = matrix_dims(gate);
    for (const TensorView* v : {&d_gate, &d_up, &d_out, &up}) check_numel(*v, N * F, "swiglu");
    constexpr const char* kOp = "swiglu_backward";
    check_same_dtype_in_place(d_gate, gate, kOp);
    check_same_dtype_in_place(d_up, up, kOp);
    cpu::swiglu_backward(floats(d_gate, kOp), floats(d_up, kOp), floats(d_out, kOp),
                         floats(gate, kOp), floats(up, kOp), N, F);
  }
  void cross_entropy_forward(TensorView loss, TensorView lse, TensorView logits,
                             const int32_t* targets, TensorView weights) const override {
    const auto [N, V] = matrix_dims(logits);
    for (const TensorView* v : {&loss, &lse, &weights}) check_numel(*v, N, "cross-entropy row");
    constexpr const char* kOp = "cross_entropy_forward";
    cpu::cross_entropy_forward(f32(loss, kOp, "loss"), f32(lse, kOp, "lse"), floats(logits, kOp),
                               targets, f32(weights, kOp, "weights"), N, V);
  }
  void cross_entropy_backward(TensorView d_logits, TensorView logits, TensorView lse,
                              const int32_t* targets, TensorView weights,
                              float d_loss) const override {
    const auto [N, V] = matrix_dims(logits);
    check_numel(d_logits, N * V, "cross-entropy d_logits");
    for (const TensorView* v : {&lse, &weights}) check_numel(*v, N, "cross-entropy row");
    constexpr const char* kOp = "cross_entropy_backward";
    check_same_dtype_in_place(d_logits, logits, kOp);
    cpu::cross_entropy_backward(floats(d_logits, kOp), floats(logits, kOp), f32(lse, kOp, "lse"),
                                targets, f32(weights, kOp, "weights"), d_loss, N, V);
  }

  void attention_forward(TensorView out, TensorView lse, TensorView q, TensorView k, TensorView v,
                         const int32_t* q_pos, const int32_t* q_seg, const int32_t* k_pos,
                         const int32_t* k_seg, const AttentionParams& p,
                         AttentionStats* stats) const override {
    constexpr const char* kOp = "attention_forward";
    check_attention_views(out, lse, q, k, v, p);
    check_float(out, kOp);
    if (attention_dtype(q, k, v, kOp) == DType::kBF16) {
      if (out.dtype() == DType::kBF16) {
        cpu::attention_forward_bf16(as<bf16>(out), f32(lse), as<bf16>(q), as<bf16>(k), as<bf16>(v),
                                    q_pos, q_seg, k_pos, k_seg, p, stats);
      } else {
        cpu::attention_forward_bf16(f32(out), f32(lse), as<bf16>(q), as<bf16>(k), as<bf16>(v),
                                    q_pos, q_seg, k_pos, k_seg, p, stats);
      }
      return;
    }
    std::vector<float> out_staging;
    cpu::attention_forward(f32_output(out, out_staging, kOp), f32(lse), f32(q), f32(k), f32(v),
                           q_pos, q_seg, k_pos, k_seg, p, stats);
    finish_f32_output(out, out_staging);
  }
  void attention_backward(TensorView dq, TensorView dk, TensorView dv, TensorView d_out,
                          TensorView out, TensorView lse, TensorView q, TensorView k, TensorView v,
                          const int32_t* q_pos, const int32_t* q_seg, const int32_t* k_pos,
                          const int32_t* k_seg, const AttentionParams& p,
                          AttentionStats* stats) const override {
    constexpr const char* kOp = "attention_backward";
    check_attention_views(out, lse, q, k, v, p);
    check_attention_views(d_out, lse, dq, dk, dv, p);
    check_float(d_out, kOp);
    check_float(out, kOp);
    if (attention_dtype(q, k, v, kOp) == DType::kBF16) {
      const bool d_out_bf16 = d_out.dtype() == DType::kBF16, out_bf16 = out.dtype() == DType::kBF16;
      auto run = [&](auto* d_out_data, auto* out_data) {
        cpu::attention_backward_bf16(f32(dq), f32(dk), f32(dv), d_out_data, out_data, f32(lse),
                                     as<bf16>(q), as<bf16>(k), as<bf16>(v), q_pos, q_seg, k_pos,
                                     k_seg, p, stats);
      };
      if (d_out_bf16 && out_bf16) run(as<bf16>(d_out), as<bf16>(out));
      if (d_out_bf16 && !out_bf16) run(as<bf16>(d_out), f32(out));
      if (!d_out_bf16 && out_bf16) run(f32(d_out), as<bf16>(out));
      if (!d_out_bf16 && !out_bf16) run(f32(d_out), f32(out));
      return;
    }
    std::vector<float> d_out_staging, out_staging;
    cpu::attention_backward(f32(dq), f32(dk), f32(dv), f32_input(d_out, d_out_staging, kOp),
                            f32_input(out, out_staging, kOp), f32(lse), f32(q), f32(k), f32(v),
                            q_pos, q_seg, k_pos, k_seg, p, stats);
  }
  void attention_merge(TensorView out, TensorView lse, TensorView out_a, TensorView lse_a,
                       TensorView out_b, TensorView lse_b, int64_t batch, int64_t seq_q,
                       int64_t heads_q, int64_t head_dim) const override {
    const int64_t rows = batch * seq_q * heads_q;
    for (const TensorView* o : {&out, &out_a, &out_b}) {
      check_numel(*o, rows * head_dim, "attention_merge out");
    }
    for (const TensorView* l : {&lse, &lse_a, &lse_b}) check_numel(*l, rows, "attention_merge lse");
    cpu::attention_merge(f32(out), f32(lse), f32(out_a), f32(lse_a), f32(out_b), f32(lse_b), batch,
                         seq_q, heads_q, head_dim);
  }
  void single_query_attention(TensorView out, TensorView lse, TensorView q, TensorView k,
                              TensorView v, const int32_t* q_pos, const int32_t* q_seg,
                              const int32_t* k_pos, const int32_t* k_seg,
                              const AttentionParams& p) const override {
    constexpr const char* kOp = "single_query_attention";
    check_attention_views(out, lse, q, k, v, p);
    std::vector<float> q_staging, out_staging;
    float* out_data = f32_output(out, out_staging, kOp);
    const float* q_data = f32_input(q, q_staging, kOp);
    check_float(k, kOp);
    MAXCTX_CHECK(v.dtype() == k.dtype(), "{}: k and v are one cache, got k {} and v {}", kOp,
                 dtype_name(k.dtype()), dtype_name(v.dtype()));
    if (k.dtype() == DType::kBF16) {
      cpu::single_query_attention(out_data, f32(lse), q_data, as<bf16>(k), as<bf16>(v), q_pos,
                                  q_seg, k_pos, k_seg, p);
    } else {
      cpu::single_query_attention(out_data, f32(lse), q_data, f32(k), f32(v), q_pos, q_seg, k_pos,
                                  k_seg, p);
    }
    finish_f32_output(out, out_staging);
  }
  void single_query_attention_int8(TensorView out, TensorView lse, TensorView q, TensorView k_codes,
                                   TensorView k_scale, TensorView v_codes, TensorView v_scale,
                                   const int32_t* q_pos, const int32_t* q_seg, const int32_t* k_pos,
                                   const int32_t* k_seg, const AttentionParams& p) const override {
    constexpr const char* kOp = "single_query_attention_int8";
    check_attention_views(out, lse, q, k_codes, v_codes, p);
    check_numel(k_scale, p.batch * p.seq_k, "k_scale");
    check_numel(v_scale, p.batch * p.seq_k, "v_scale");
    std::vector<float> q_staging, out_staging;
    cpu::single_query_attention_int8(f32_output(out, out_staging, kOp), f32(lse),
                                     f32_input(q, q_staging, kOp), as<int8_t>(k_codes),
                                     f32(k_scale), as<int8_t>(v_codes), f32(v_scale), q_pos, q_seg,
                                     k_pos, k_seg, p);
    finish_f32_output(out, out_staging);
  }

  // bf16 views are widened to fp32 first (exact), bf16 outputs rounded once.
  Int8Weights int8_pack_weights(TensorView weight) const override {
    const auto [out_dim, in_dim] = matrix_dims(weight);
    std::vector<float> scratch;
    return cpu::int8_pack_weights(f32_input(weight, scratch, "int8_pack_weights"), out_dim, in_dim);
  }
  Int8Weights int8_pack_codes(TensorView codes, TensorView scale) const override {
    MAXCTX_CHECK(codes.dtype() == DType::kI8 && codes.shape().rank() == 2,
                 "int8_pack_codes: codes must be (out, in) int8");
    const int64_t out_dim = codes.shape()[0];
    check_numel(scale, out_dim, "int8_pack_codes scale");
    return cpu::int8_pack_codes(codes.data<int8_t>(), f32(scale, "int8_pack_codes", "scale"),
                                out_dim, codes.shape()[1]);
  }
  void int8_quantize_rows(Int8Rows& rows, TensorView in) const override {
    MAXCTX_CHECK_EQ(in.shape().rank(), 2, "int8 rows are quantized from an (N, in_dim) tensor");
    std::vector<float> scratch;
    cpu::int8_quantize_rows(rows, f32_input(in, scratch, "int8_quantize_rows"), in.shape()[0],
                            in.shape()[1]);
  }
  void int8_matmul_forward(TensorView out, const Int8Rows& rows,
                           const Int8Weights& weight) const override {
    check_numel(out, rows.rows * weight.out_dim, "int8 matmul output");
    const Floats out_floats = gemm_floats(out, "int8_matmul_forward");
    if (out_floats.dtype == DType::kF32) return cpu::int8_matmul_forward(f32(out), rows, weight);
    std::vector<float> out_f32(static_cast<size_t>(out.numel()));
    cpu::int8_matmul_forward(out_f32.data(), rows, weight);
    convert_f32_to_bf16(out_f32, out.span<bf16>());
  }
  void quantize_rows_int8(TensorView codes, TensorView scale, TensorView x,
                          float levels) const override {
    const int64_t rows = scale.numel();
    const int64_t cols = rows == 0 ? 0 : x.numel() / rows;
    check_numel(x, rows * cols, "quantized x");
    check_numel(codes, rows * cols, "int8 codes");
    constexpr const char* kOp = "quantize_rows_int8";
    cpu::quantize_rows_int8(as<int8_t>(codes), f32(scale, kOp, "scale"), floats(x, kOp), rows, cols,
                            levels);
  }
  void dequantize_rows_int8(TensorView x, TensorView codes, TensorView scale) const override {
    const int64_t rows = scale.numel();
    const int64_t cols = rows == 0 ? 0 : x.numel() / rows;
    check_numel(x, rows * cols, "dequantized x");
    check_numel(codes, rows * cols, "int8 codes");
    constexpr const char* kOp = "dequantize_rows_int8";
    cpu::dequantize_rows_int8(floats(x, kOp), as<int8_t>(codes), f32(scale, kOp, "scale"), rows,
                              cols);
  }

  void add(TensorView out, TensorView a, TensorView b) const override {
    check_numel(a, out.numel(), "add a");
    check_numel(b, out.numel(), "add b");
    constexpr const char* kOp = "add";
    check_same_dtype_in_place(out, a, kOp);
    check_same_dtype_in_place(out, b, kOp);
    cpu::add(floats(out, kOp), floats(a, kOp), floats(b, kOp), out.numel());
  }
  void add_inplace(TensorView acc, TensorView x) const override {
    check_numel(x, acc.numel(), "add_inplace x");
    constexpr const char* kOp = "add_inplace";
    cpu::add_inplace(floats(acc, kOp), floats(x, kOp), acc.numel());
  }
  void scale(TensorView out, TensorView in, float alpha) const override {
    check_numel(in, out.numel(), "scale input");
    constexpr const char* kOp = "scale";
    check_same_dtype_in_place(out, in, kOp);
    cpu::scale(floats(out, kOp), floats(in, kOp), alpha, out.numel());
  }
  void fill_zero(TensorView x) const override {
    check_host(x);
    std::memset(x.raw(), 0, x.bytes());
  }
  void copy(TensorView dst, TensorView src) const override {
    check_host(dst);
    check_host(src);
    check_numel(dst, src.numel(), "copy destination");
    if (dst.dtype() == src.dtype()) {
      std::memmove(dst.raw(), src.raw(), src.bytes());
      return;
    }
    MAXCTX_CHECK(dst.dtype() != DType::kI8 && src.dtype() != DType::kI8,
                 "the cpu backend copies {} to {} only by int8 quantization",
                 dtype_name(src.dtype()), dtype_name(dst.dtype()));
    // f32 <-> bf16: the SIMD conversion (rounding to nearest even, as core/dtype.h does).
    cpu::convert(floats(dst, "copy"), floats(src, "copy"), src.numel());
  }
  void adamw_update(TensorView params, TensorView grads, TensorView mu, TensorView nu,
                    const AdamWStep& step) const override {
    for (const TensorView* v : {&grads, &mu, &nu}) check_numel(*v, params.numel(), "AdamW");
    constexpr const char* kOp = "adamw_update";
    cpu::adamw_update(floats(params, kOp), floats(grads, kOp), floats(mu, kOp), floats(nu, kOp),
                      params.numel(), step);
  }

  void sum_in_order(double* out, TensorView x) const override {
    *checked_readout(out, "sum_in_order") =
        cpu::sum_in_order(f32(x, "sum_in_order", "x"), x.numel());
  }
  void sum_of_squares(double* out, TensorView x) const override {
    *checked_readout(out, "sum_of_squares") =
        cpu::sum_of_squares_in_order(floats(x, "sum_of_squares"), x.numel());
  }
  void count_arg_max_hits(double* out, TensorView logits, const int32_t* targets,
                          TensorView weights) const override {
    constexpr const char* kOp = "count_arg_max_hits";
    const auto [N, V] = readout_logits(logits, targets, kOp);
    check_numel(weights, N, "count_arg_max_hits weights");
    *checked_readout(out, kOp) = static_cast<double>(cpu::count_arg_max_hits(
        f32(logits, kOp, "logits"), targets, f32(weights, kOp, "weights"), N, V));
  }
  void arg_max_rows(int32_t* ids, TensorView logits) const override {
    constexpr const char* kOp = "arg_max_rows";
    const auto [N, V] = readout_logits(logits, ids, kOp);
    cpu::arg_max_rows(ids, f32(logits, kOp, "logits"), N, V);
  }
  void scale_by_ratio(TensorView x, float divisor, float multiplier) const override {
    cpu::scale_by_ratio(floats(x, "scale_by_ratio"), x.numel(), divisor, multiplier);
  }

 private:
  // The two matmul backwards differ only in whether d_in is overwritten or accumulated.
  using MatmulBackward = void (*)(Floats, float*, ConstFloats, ConstFloats, ConstFloats, int64_t,
                                  int64_t, int64_t);
  static void matmul_backward_with(MatmulBackward backward, TensorView d_in, TensorView d_weight,
                                   TensorView d_out, TensorView in, TensorView weight) {
    const auto [out_dim, in_dim] = matrix_dims(weight);
    const int64_t N = rows_of(in, in_dim);
    check_numel(d_out, N * out_dim, "matmul d_out");
    check_numel(d_weight, out_dim * in_dim, "matmul d_weight");
    Floats d_in_data{nullptr, DType::kF32};  // empty d_in: the input gradient is skipped
    if (!d_in.empty()) {
      check_numel(d_in, N * in_dim, "matmul d_in");
      d_in_data = gemm_floats(d_in, "matmul_backward");
    }
    MAXCTX_CHECK(d_weight.dtype() == DType::kF32,
                 "matmul_backward accumulates d_weight in f32 only, got a {} d_weight",
                 dtype_name(d_weight.dtype()));
    backward(d_in_data, f32(d_weight), const_floats(d_out, "matmul_backward"),
             const_floats(in, "matmul_backward"), const_floats(weight, "matmul_backward"), N,
             in_dim, out_dim);
  }
};

}  // namespace

const Kernels& cpu_kernels() {
  static const CpuKernels kCpu;
  return kCpu;
}

}  // namespace maxctx::kernels::cpu

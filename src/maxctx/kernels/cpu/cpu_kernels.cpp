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
#include "maxctx/kernels/cpu/rmsnorm.h"
#include "maxctx/kernels/cpu/rope.h"
#include "maxctx/kernels/cpu/single_query_attention.h"
#include "maxctx/kernels/cpu/swiglu.h"

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

// A view of f32 or bf16 elements (the precision contract's "float" views); `op` names the op in
// the error.
Floats floats(const TensorView& v, const char* op) {
  check_host(v);
  MAXCTX_CHECK(v.dtype() == DType::kF32 || v.dtype() == DType::kBF16,
               "{} takes f32 or bf16 tensors, got a {} tensor", op, dtype_name(v.dtype()));
  return {v.raw(), v.dtype()};
}
ConstFloats const_floats(const TensorView& v, const char* op) {
  const Floats x = floats(v, op);
  return {x.data, x.dtype};
}
// The fp32 values of a float view: the view's own memory when f32, else widened into `scratch`.
const float* widened(const TensorView& v, const char* op, std::vector<float>& scratch) {
  const Floats x = floats(v, op);
  if (x.dtype == DType::kF32) return static_cast<const float*>(x.data);
  scratch.resize(static_cast<size_t>(v.numel()));
  convert_bf16_to_f32(v.span<bf16>(), scratch);
  return scratch.data();
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

// (out_dim, in_dim) of a weight matrix view.
struct MatrixDims {
  int64_t out_dim, in_dim;
};
MatrixDims matrix_dims(const TensorView& weight) {
  MAXCTX_CHECK_EQ(weight.shape().rank(), 2, "a weight matrix is (out_dim, in_dim), got shape {}",
                  weight.shape().to_string());
  return {weight.shape()[0], weight.shape()[1]};
}

int64_t attention_q_numel(const AttentionParams& p) {
  return p.batch * p.seq_q * p.heads_q * p.head_dim;
}
int64_t attention_kv_numel(const AttentionParams& p) {
  return p.batch * p.seq_k * p.heads_kv * p.head_dim;
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
    cpu::matmul_forward(floats(out, "matmul_forward"), const_floats(in, "matmul_forward"),
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
    cpu::embedding_forward(f32(out), tokens, f32(table), rows_of(out, E), E, V);
  }
  void embedding_backward(TensorView d_table, TensorView d_out,
                          const int32_t* tokens) const override {
    const auto [V, E] = matrix_dims(d_table);
    cpu::embedding_backward(f32(d_table), f32(d_out), tokens, rows_of(d_out, E), E, V);
  }
  void rmsnorm_forward(TensorView out, TensorView rstd, TensorView in, TensorView weight,
                       float eps) const override {
    const int64_t D = weight.numel();
    const int64_t N = rows_of(in, D);
    check_numel(out, N * D, "rmsnorm output");
    check_numel(rstd, N, "rmsnorm rstd");
    cpu::rmsnorm_forward(f32(out), f32(rstd), f32(in), f32(weight), N, D, eps);
  }
  void rmsnorm_backward(TensorView d_in, TensorView d_weight, TensorView d_out, TensorView in,
                        TensorView weight, TensorView rstd) const override {
    const int64_t D = weight.numel();
    const int64_t N = rows_of(in, D);
    check_numel(d_in, N * D, "rmsnorm d_in");
    check_numel(d_out, N * D, "rmsnorm d_out");
    check_numel(d_weight, D, "rmsnorm d_weight");
    check_numel(rstd, N, "rmsnorm rstd");
    cpu::rmsnorm_backward(f32(d_in), f32(d_weight), f32(d_out), f32(in), f32(weight), f32(rstd), N,
                          D);
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
    cpu::rope_forward(f32(out), f32(in), f32(cos), f32(sin), N, heads, 2 * half);
  }
  void rope_backward(TensorView d_in, TensorView d_out, TensorView cos,
                     TensorView sin) const override {
    const auto [N, half] = matrix_dims(cos);
    const int64_t heads = rows_of(d_out, N * 2 * half);
    check_numel(d_in, d_out.numel(), "rope d_in");
    cpu::rope_backward(f32(d_in), f32(d_out), f32(cos), f32(sin), N, heads, 2 * half);
  }
  void swiglu_forward(TensorView out, TensorView gate, TensorView up) const override {
    const auto [N, F] = matrix_dims(gate);
    check_numel(up, N * F, "swiglu up");
    check_numel(out, N * F, "swiglu output");
    cpu::swiglu_forward(f32(out), f32(gate), f32(up), N, F);
  }
  void swiglu_backward(TensorView d_gate, TensorView d_up, TensorView d_out, TensorView gate,
                       TensorView up) const override {
    const auto [N, F] = matrix_dims(gate);
    for (const TensorView* v : {&d_gate, &d_up, &d_out, &up}) check_numel(*v, N * F, "swiglu");
    cpu::swiglu_backward(f32(d_gate), f32(d_up), f32(d_out), f32(gate), f32(up), N, F);
  }
  void cross_entropy_forward(TensorView loss, TensorView lse, TensorView logits,
                             const int32_t* targets, TensorView weights) const override {
    const auto [N, V] = matrix_dims(logits);
    for (const TensorView* v : {&loss, &lse, &weights}) check_numel(*v, N, "cross-entropy row");
    cpu::cross_entropy_forward(f32(loss), f32(lse), f32(logits), targets, f32(weights), N, V);
  }
  void cross_entropy_backward(TensorView d_logits, TensorView logits, TensorView lse,
                              const int32_t* targets, TensorView weights,
                              float d_loss) const override {
    const auto [N, V] = matrix_dims(logits);
    check_numel(d_logits, N * V, "cross-entropy d_logits");
    for (const TensorView* v : {&lse, &weights}) check_numel(*v, N, "cross-entropy row");
    cpu::cross_entropy_backward(f32(d_logits), f32(logits), f32(lse), targets, f32(weights), d_loss,
                                N, V);
  }

  void attention_forward(TensorView out, TensorView lse, TensorView q, TensorView k, TensorView v,
                         const int32_t* q_pos, const int32_t* q_seg, const int32_t* k_pos,
                         const int32_t* k_seg, const AttentionParams& p,
                         AttentionStats* stats) const override {
    check_attention_views(out, lse, q, k, v, p);
    cpu::attention_forward(f32(out), f32(lse), f32(q), f32(k), f32(v), q_pos, q_seg, k_pos, k_seg,
                           p, stats);
  }
  void attention_backward(TensorView dq, TensorView dk, TensorView dv, TensorView d_out,
                          TensorView out, TensorView lse, TensorView q, TensorView k, TensorView v,
                          const int32_t* q_pos, const int32_t* q_seg, const int32_t* k_pos,
                          const int32_t* k_seg, const AttentionParams& p,
                          AttentionStats* stats) const override {
    check_attention_views(out, lse, q, k, v, p);
    check_attention_views(d_out, lse, dq, dk, dv, p);
    cpu::attention_backward(f32(dq), f32(dk), f32(dv), f32(d_out), f32(out), f32(lse), f32(q),
                            f32(k), f32(v), q_pos, q_seg, k_pos, k_seg, p, stats);
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
    check_attention_views(out, lse, q, k, v, p);
    cpu::single_query_attention(f32(out), f32(lse), f32(q), f32(k), f32(v), q_pos, q_seg, k_pos,
                                k_seg, p);
  }
  void single_query_attention_int8(TensorView out, TensorView lse, TensorView q, TensorView k_codes,
                                   TensorView k_scale, TensorView v_codes, TensorView v_scale,
                                   const int32_t* q_pos, const int32_t* q_seg, const int32_t* k_pos,
                                   const int32_t* k_seg, const AttentionParams& p) const override {
    check_attention_views(out, lse, q, k_codes, v_codes, p);
    check_numel(k_scale, p.batch * p.seq_k, "k_scale");
    check_numel(v_scale, p.batch * p.seq_k, "v_scale");
    cpu::single_query_attention_int8(f32(out), f32(lse), f32(q), as<int8_t>(k_codes), f32(k_scale),
                                     as<int8_t>(v_codes), f32(v_scale), q_pos, q_seg, k_pos, k_seg,
                                     p);
  }

  // bf16 views are widened to fp32 first (exact), bf16 outputs rounded once.
  Int8Weights int8_pack_weights(TensorView weight) const override {
    const auto [out_dim, in_dim] = matrix_dims(weight);
    std::vector<float> scratch;
    return cpu::int8_pack_weights(widened(weight, "int8_pack_weights", scratch), out_dim, in_dim);
  }
  void int8_quantize_rows(Int8Rows& rows, TensorView in) const override {
    MAXCTX_CHECK_EQ(in.shape().rank(), 2, "int8 rows are quantized from an (N, in_dim) tensor");
    std::vector<float> scratch;
    cpu::int8_quantize_rows(rows, widened(in, "int8_quantize_rows", scratch), in.shape()[0],
                            in.shape()[1]);
  }
  void int8_matmul_forward(TensorView out, const Int8Rows& rows,
                           const Int8Weights& weight) const override {
    check_numel(out, rows.rows * weight.out_dim, "int8 matmul output");
    const Floats out_floats = floats(out, "int8_matmul_forward");
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
    cpu::quantize_rows_int8(as<int8_t>(codes), f32(scale), f32(x), rows, cols, levels);
  }
  void dequantize_rows_int8(TensorView x, TensorView codes, TensorView scale) const override {
    const int64_t rows = scale.numel();
    const int64_t cols = rows == 0 ? 0 : x.numel() / rows;
    check_numel(x, rows * cols, "dequantized x");
    check_numel(codes, rows * cols, "int8 codes");
    cpu::dequantize_rows_int8(f32(x), as<int8_t>(codes), f32(scale), rows, cols);
  }

  void add(TensorView out, TensorView a, TensorView b) const override {
    check_numel(a, out.numel(), "add a");
    check_numel(b, out.numel(), "add b");
    cpu::add(f32(out), f32(a), f32(b), out.numel());
  }
  void add_inplace(TensorView acc, TensorView x) const override {
    check_numel(x, acc.numel(), "add_inplace x");
    cpu::add_inplace(f32(acc), f32(x), acc.numel());
  }
  void scale(TensorView out, TensorView in, float alpha) const override {
    check_numel(in, out.numel(), "scale input");
    cpu::scale(f32(out), f32(in), alpha, out.numel());
  }
  void fill_zero(TensorView x) const override {
    check_host(x);
    std::memset(x.raw(), 0, x.bytes());
  }
  double sum_of_squares(TensorView x) const override {
    return cpu::sum_of_squares(f32(x), x.numel());
  }
  void copy(TensorView dst, TensorView src) const override {
    check_host(dst);
    check_host(src);
    check_numel(dst, src.numel(), "copy destination");
    if (dst.dtype() == src.dtype()) {
      std::memmove(dst.raw(), src.raw(), src.bytes());
    } else if (dst.dtype() == DType::kBF16 && src.dtype() == DType::kF32) {
      convert_f32_to_bf16(src.span<float>(), dst.span<bf16>());
    } else if (dst.dtype() == DType::kF32 && src.dtype() == DType::kBF16) {
      convert_bf16_to_f32(src.span<bf16>(), dst.span<float>());
    } else {
      MAXCTX_CHECK(false, "the cpu backend copies {} to {} only by int8 quantization",
                   dtype_name(src.dtype()), dtype_name(dst.dtype()));
    }
  }
  void adamw_update(TensorView params, TensorView grads, TensorView mu, TensorView nu,
                    const AdamWStep& step) const override {
    for (const TensorView* v : {&grads, &mu, &nu}) check_numel(*v, params.numel(), "AdamW");
    cpu::adamw_update(f32(params), f32(grads), f32(mu), f32(nu), params.numel(), step);
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
      d_in_data = floats(d_in, "matmul_backward");
    }
    MAXCTX_CHECK(d_weight.dtype() == DType::kF32,
                 "matmul_backward accumulates d_weight in f32 only, got a {} d_weight",
                 dtype_name(d_weight.dtype()));
    backward(d_in_data, f32(d_weight), const_floats(d_out, "matmul_backward"),
             const_floats(in, "matmul_backward"), const_floats(weight, "matmul_backward"), N,
             in_dim, out_dim);
  }

  static void check_attention_views(const TensorView& out, const TensorView& lse,
                                    const TensorView& q, const TensorView& k, const TensorView& v,
                                    const AttentionParams& p) {
    check_numel(q, attention_q_numel(p), "attention q");
    check_numel(out, attention_q_numel(p), "attention out");
    check_numel(lse, p.batch * p.heads_q * p.seq_q, "attention lse");
    check_numel(k, attention_kv_numel(p), "attention k");
    check_numel(v, attention_kv_numel(p), "attention v");
  }
};

}  // namespace

const Kernels& cpu_kernels() {
  static const CpuKernels kCpu;
  return kCpu;
}

}  // namespace maxctx::kernels::cpu

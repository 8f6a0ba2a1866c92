// The cuda backend: checks each view's device, dtype and element count (the cpu backend's
// checks, with the same messages), then calls the device kernel (ops.h, gemm.h, int8.h,
// attention_reference.h). Index arrays (token ids, targets, positions, segments) are device
// pointers, as kernels.h says: in the backend's memory. Host code (g++), compiled only with
// the CUDA toolchain (the .cu files it calls exist only then).
#if MAXCTX_HAVE_CUDA
#include "maxctx/kernels/cuda/cuda_kernels.h"

#include "maxctx/core/check.h"
#include "maxctx/kernels/cuda/allocator.h"
#include "maxctx/kernels/cuda/attention_reference.h"
#include "maxctx/kernels/cuda/devices.h"
#include "maxctx/kernels/cuda/flash_attention.h"
#include "maxctx/kernels/cuda/gemm.h"
#include "maxctx/kernels/cuda/int8.h"
#include "maxctx/kernels/cuda/ops.h"
#include "maxctx/kernels/cuda/stream.h"
#include "maxctx/kernels/transfer_counter.h"
#include "maxctx/kernels/view_checks.h"

namespace maxctx::kernels::cuda {
namespace {

void check_device(const TensorView& v) {
  MAXCTX_CHECK(v.device() == Device::kCuda, "the cuda backend was given a {} tensor",
               device_name(v.device()));
}

void check_float(const TensorView& v, const char* op) {
  check_device(v);
  MAXCTX_CHECK(v.dtype() == DType::kF32 || v.dtype() == DType::kBF16,
               "the cuda backend's {} takes f32 or bf16 tensors, got a {} tensor", op,
               dtype_name(v.dtype()));
}
DeviceFloats floats(const TensorView& v, const char* op) {
  check_float(v, op);
  return {v.raw(), v.dtype() == DType::kBF16};
}
float* f32(const TensorView& v, const char* op, const char* what) {
  check_device(v);
  MAXCTX_CHECK(v.dtype() == DType::kF32, "the cuda backend's {} takes {} as f32, got a {} tensor",
               op, what, dtype_name(v.dtype()));
  return static_cast<float*>(v.raw());
}
int8_t* i8(const TensorView& v, const char* op, const char* what) {
  check_device(v);
  MAXCTX_CHECK(v.dtype() == DType::kI8, "the cuda backend's {} takes {} as int8, got a {} tensor",
               op, what, dtype_name(v.dtype()));
  return static_cast<int8_t*>(v.raw());
}
// The element counts (view_checks.h), and every view in device memory.
void check_device_attention_views(const TensorView& out, const TensorView& lse, const TensorView& q,
                                  const TensorView& k, const TensorView& v,
                                  const AttentionParams& p) {
  for (const TensorView* t : {&out, &lse, &q, &k, &v}) check_device(*t);
  check_attention_views(out, lse, q, k, v, p);
}

void check_vocabulary(int64_t V) { MAXCTX_CHECK_GT(V, 0, "the vocabulary must not be empty"); }

class CudaKernels final : public Kernels {
 public:
  const char* name() const override { return "cuda"; }
  Device device() const override { return Device::kCuda; }
  const Allocator& allocator() const override { return cuda_allocator(); }
  // Every readback and wait is counted (transfer_counts): the one-readback-per-step rule is
  // checked on the device itself.
  void synchronize() const override {
    transfers_.wait();
    synchronize_stream();
  }
  Event record_event() const override { return record_stream_event(); }
  Stream stream() const override { return compute_stream(); }
  void copy_from_host_async(void* backend_memory, const void* host, size_t bytes) const override {
    copy_from_host_staged(backend_memory, host, bytes);
  }
  Event copy_to_host_async(void* host, const void* backend_memory, size_t bytes) const override {
    transfers_.download(/*waits=*/false);
    return copy_to_host_staged(host, backend_memory, bytes);
  }
  void offload_to_host_async(void* host, const void* backend_memory, size_t bytes) const override {
    transfers_.offload();
    // Complete at the next synchronize(). A layer's activations exceed the staging buffers, so
    // this is a synchronous copy today: correct, not overlapped (pinned host buffers for the
    // offloaded activations would let it run beside the next layer).
    copy_to_host_staged(host, backend_memory, bytes);
  }
  void copy_to_host(void* host, const void* backend_memory, size_t bytes) const override {
    transfers_.download(/*waits=*/true);
    Kernels::copy_to_host(host, backend_memory, bytes);
  }
  std::optional<TransferCounts> transfer_counts() const override { return transfers_.read(); }

  void matmul_forward(TensorView out, TensorView in, TensorView weight) const override {
    constexpr const char* kOp = "matmul_forward";
    const auto [out_dim, in_dim] = matrix_dims(weight);
    const int64_t N = rows_of(in, in_dim);
    check_numel(out, N * out_dim, "matmul output");
    cuda::matmul_forward(floats(out, kOp), floats(in, kOp), floats(weight, kOp), N, in_dim,
                         out_dim);
  }
  void matmul_backward(TensorView d_in, TensorView d_weight, TensorView d_out, TensorView in,
                       TensorView weight) const override {
    matmul_backward_with(false, d_in, d_weight, d_out, in, weight);
  }
  void matmul_backward_accumulate_input(TensorView d_in, TensorView d_weight, TensorView d_out,
                                        TensorView in, TensorView weight) const override {
    matmul_backward_with(true, d_in, d_weight, d_out, in, weight);
  }
  void embedding_forward(TensorView out, const int32_t* tokens, TensorView table) const override {
    constexpr const char* kOp = "embedding_forward";
    const auto [V, E] = matrix_dims(table);
    const int64_t N = rows_of(out, E);
    const DeviceFloats out_data = floats(out, kOp), table_data = floats(table, kOp);
    cuda::embedding_forward(out_data, tokens, table_data, N, E, V);
  }
  void embedding_backward(TensorView d_table, TensorView d_out,
                          const int32_t* tokens) const override {
    constexpr const char* kOp = "embedding_backward";
    const auto [V, E] = matrix_dims(d_table);
    const int64_t N = rows_of(d_out, E);
    float* table_data = f32(d_table, kOp, "d_table");
    const DeviceFloats d_out_data = floats(d_out, kOp);
    cuda::embedding_backward(table_data, d_out_data, tokens, N, E, V);
  }
  void rmsnorm_forward(TensorView out, TensorView rstd, TensorView in, TensorView weight,
                       float eps) const override {
    constexpr const char* kOp = "rmsnorm_forward";
    const int64_t D = weight.numel();
    const int64_t N = rows_of(in, D);
    check_numel(out, N * D, "rmsnorm output");
    check_numel(rstd, N, "rmsnorm rstd");
    cuda::rmsnorm_forward(floats(out, kOp), f32(rstd, kOp, "rstd"), floats(in, kOp),
                          floats(weight, kOp), N, D, eps);
  }
  void rmsnorm_backward(TensorView d_in, TensorView d_weight, TensorView d_out, TensorView in,
                        TensorView weight, TensorView rstd) const override {
    constexpr const char* kOp = "rmsnorm_backward";
    const int64_t D = weight.numel();
    const int64_t N = rows_of(in, D);
    check_numel(d_in, N * D, "rmsnorm d_in");
    check_numel(d_out, N * D, "rmsnorm d_out");
    check_numel(d_weight, D, "rmsnorm d_weight");
    check_numel(rstd, N, "rmsnorm rstd");
    cuda::rmsnorm_backward(floats(d_in, kOp), f32(d_weight, kOp, "d_weight"), floats(d_out, kOp),
                           floats(in, kOp), floats(weight, kOp), f32(rstd, kOp, "rstd"), N, D);
  }
  void rope_cos_sin(TensorView cos, TensorView sin, const int32_t* positions,
                    const RopeParams& params) const override {
    constexpr const char* kOp = "rope_cos_sin";
    const auto [N, half] = matrix_dims(cos);
    check_numel(sin, N * half, "rope sin");
    cuda::rope_cos_sin(f32(cos, kOp, "cos"), f32(sin, kOp, "sin"), positions, N, 2 * half, params);
  }
  void rope_forward(TensorView out, TensorView in, TensorView cos, TensorView sin) const override {
    rope_with("rope_forward", 1.0f, out, in, cos, sin);
  }
  void rope_backward(TensorView d_in, TensorView d_out, TensorView cos,
                     TensorView sin) const override {
    rope_with("rope_backward", -1.0f, d_in, d_out, cos, sin);
  }
  void swiglu_forward(TensorView out, TensorView gate, TensorView up) const override {
    constexpr const char* kOp = "swiglu_forward";
    const auto [N, F] = matrix_dims(gate);
    check_numel(up, N * F, "swiglu up");
    check_numel(out, N * F, "swiglu output");
    check_same_dtype_in_place(out, gate, kOp);
    check_same_dtype_in_place(out, up, kOp);
    cuda::swiglu_forward(floats(out, kOp), floats(gate, kOp), floats(up, kOp), N * F);
  }
  void swiglu_backward(TensorView d_gate, TensorView d_up, TensorView d_out, TensorView gate,
                       TensorView up) const override {
    constexpr const char* kOp = "swiglu_backward";
    const auto [N, F] = matrix_dims(gate);
    for (const TensorView* v : {&d_gate, &d_up, &d_out, &up}) check_numel(*v, N * F, "swiglu");
    check_same_dtype_in_place(d_gate, gate, kOp);
    check_same_dtype_in_place(d_up, up, kOp);
    cuda::swiglu_backward(floats(d_gate, kOp), floats(d_up, kOp), floats(d_out, kOp),
                          floats(gate, kOp), floats(up, kOp), N * F);
  }
  void cross_entropy_forward(TensorView loss, TensorView lse, TensorView logits,
                             const int32_t* targets, TensorView weights) const override {
    constexpr const char* kOp = "cross_entropy_forward";
    const auto [N, V] = matrix_dims(logits);
    for (const TensorView* v : {&loss, &lse, &weights}) check_numel(*v, N, "cross-entropy row");
    check_vocabulary(V);
    cuda::cross_entropy_forward(f32(loss, kOp, "loss"), f32(lse, kOp, "lse"), floats(logits, kOp),
                                targets, f32(weights, kOp, "weights"), N, V);
  }
  void cross_entropy_backward(TensorView d_logits, TensorView logits, TensorView lse,
                              const int32_t* targets, TensorView weights,
                              float d_loss) const override {
    constexpr const char* kOp = "cross_entropy_backward";
    const auto [N, V] = matrix_dims(logits);
    check_numel(d_logits, N * V, "cross-entropy d_logits");
    for (const TensorView* v : {&lse, &weights}) check_numel(*v, N, "cross-entropy row");
    check_same_dtype_in_place(d_logits, logits, kOp);
    check_vocabulary(V);
    cuda::cross_entropy_backward(floats(d_logits, kOp), floats(logits, kOp), f32(lse, kOp, "lse"),
                                 targets, f32(weights, kOp, "weights"), d_loss, N, V);
  }

  // The flash kernels (flash_attention.h) for the head dims they are built for (64, 128); other
  // head dims (the tests' tiny models) run the plain device kernel (attention_reference.h), which
  // is also what cuda_attention_test holds the flash kernels against. Both take the same mask
  // semantics and accumulate the same way; the choice depends on the shape only.
  static bool flash_supports(const AttentionParams& p) {
    return p.head_dim == 64 || p.head_dim == 128;
  }
  void attention_forward(TensorView out, TensorView lse, TensorView q, TensorView k, TensorView v,
                         const int32_t* q_pos, const int32_t* q_seg, const int32_t* k_pos,
                         const int32_t* k_seg, const AttentionParams& p,
                         AttentionStats* stats) const override {
    check_device_attention_views(out, lse, q, k, v, p);
    check_attention_alignment(q, k, v, p, "attention_forward");
    if (flash_supports(p)) {
      flash_attention_forward(out, lse, q, k, v, q_pos, q_seg, k_pos, k_seg, p, stats, nullptr);
      return;
    }
    attention_forward_reference(out, lse, q, k, v, q_pos, q_seg, k_pos, k_seg, p, stats);
  }
  void attention_backward(TensorView dq, TensorView dk, TensorView dv, TensorView d_out,
                          TensorView out, TensorView lse, TensorView q, TensorView k, TensorView v,
                          const int32_t* q_pos, const int32_t* q_seg, const int32_t* k_pos,
                          const int32_t* k_seg, const AttentionParams& p,
                          AttentionStats* stats) const override {
    check_device_attention_views(out, lse, q, k, v, p);
    check_device_attention_views(d_out, lse, dq, dk, dv, p);
    check_attention_alignment(q, k, v, p, "attention_backward");
    if (flash_supports(p)) {
      flash_attention_backward(dq, dk, dv, d_out, out, lse, q, k, v, q_pos, q_seg, k_pos, k_seg, p,
                               stats, nullptr);
      return;
    }
    attention_backward_reference(dq, dk, dv, d_out, out, lse, q, k, v, q_pos, q_seg, k_pos, k_seg,
                                 p, stats);
  }
  void attention_merge(TensorView out, TensorView lse, TensorView out_a, TensorView lse_a,
                       TensorView out_b, TensorView lse_b, int64_t batch, int64_t seq_q,
                       int64_t heads_q, int64_t head_dim) const override {
    constexpr const char* kOp = "attention_merge";
    const int64_t rows = batch * seq_q * heads_q;
    for (const TensorView* o : {&out, &out_a, &out_b}) {
      check_numel(*o, rows * head_dim, "attention_merge out");
    }
    for (const TensorView* l : {&lse, &lse_a, &lse_b}) check_numel(*l, rows, "attention_merge lse");
    cuda::attention_merge(f32(out, kOp, "out"), f32(lse, kOp, "lse"), f32(out_a, kOp, "out_a"),
                          f32(lse_a, kOp, "lse_a"), f32(out_b, kOp, "out_b"),
                          f32(lse_b, kOp, "lse_b"), batch, seq_q, heads_q, head_dim);
  }
  void single_query_attention(TensorView out, TensorView lse, TensorView q, TensorView k,
                              TensorView v, const int32_t* q_pos, const int32_t* q_seg,
                              const int32_t* k_pos, const int32_t* k_seg,
                              const AttentionParams& p) const override {
    check_device_attention_views(out, lse, q, k, v, p);
    MAXCTX_CHECK(k.dtype() != DType::kI8,
                 "single_query_attention takes an f32 or bf16 cache; an int8 cache goes through "
                 "single_query_attention_int8");
    single_query_attention_reference(out, lse, q, k, TensorView(), v, TensorView(), q_pos, q_seg,
                                     k_pos, k_seg, p);
  }
  void single_query_attention_int8(TensorView out, TensorView lse, TensorView q, TensorView k_codes,
                                   TensorView k_scale, TensorView v_codes, TensorView v_scale,
                                   const int32_t* q_pos, const int32_t* q_seg, const int32_t* k_pos,
                                   const int32_t* k_seg, const AttentionParams& p) const override {
    constexpr const char* kOp = "single_query_attention_int8";
    check_device_attention_views(out, lse, q, k_codes, v_codes, p);
    check_numel(k_scale, p.batch * p.seq_k, "k_scale");
    check_numel(v_scale, p.batch * p.seq_k, "v_scale");
    i8(k_codes, kOp, "k codes");
    i8(v_codes, kOp, "v codes");
    check_device(k_scale);
    check_device(v_scale);
    single_query_attention_reference(out, lse, q, k_codes, k_scale, v_codes, v_scale, q_pos, q_seg,
                                     k_pos, k_seg, p);
  }

  Int8Weights int8_pack_weights(TensorView weight) const override {
    const auto [out_dim, in_dim] = matrix_dims(weight);
    return cuda::int8_pack_weights(floats(weight, "int8_pack_weights"), out_dim, in_dim);
  }
  Int8Weights int8_pack_codes(TensorView codes, TensorView scale) const override {
    constexpr const char* kOp = "int8_pack_codes";
    MAXCTX_CHECK(codes.dtype() == DType::kI8 && codes.shape().rank() == 2,
                 "int8_pack_codes: codes must be (out, in) int8");
    const int64_t out_dim = codes.shape()[0];
    check_numel(scale, out_dim, "int8_pack_codes scale");
    return cuda::int8_pack_codes(i8(codes, kOp, "codes"), f32(scale, kOp, "scale"), out_dim,
                                 codes.shape()[1]);
  }
  void int8_quantize_rows(Int8Rows& rows, TensorView in) const override {
    MAXCTX_CHECK_EQ(in.shape().rank(), 2, "int8 rows are quantized from an (N, in_dim) tensor");
    cuda::int8_quantize_rows(rows, floats(in, "int8_quantize_rows"), in.shape()[0], in.shape()[1]);
  }
  void int8_matmul_forward(TensorView out, const Int8Rows& rows,
                           const Int8Weights& weight) const override {
    check_numel(out, rows.rows * weight.out_dim, "int8 matmul output");
    MAXCTX_CHECK(rows.device.device() == Device::kCuda && weight.packed.device() == Device::kCuda,
                 "int8_matmul_forward on the cuda backend takes rows and weights it quantized "
                 "(int8_quantize_rows, int8_pack_weights of this backend)");
    MAXCTX_CHECK_EQ(rows.quads, weight.quads, "int8 rows and weight differ in in_dim");
    cuda::int8_matmul_forward(floats(out, "int8_matmul_forward"), rows, weight);
  }
  void quantize_rows_int8(TensorView codes, TensorView scale, TensorView x,
                          float levels) const override {
    constexpr const char* kOp = "quantize_rows_int8";
    const int64_t rows = scale.numel();
    const int64_t cols = rows == 0 ? 0 : x.numel() / rows;
    check_numel(x, rows * cols, "quantized x");
    check_numel(codes, rows * cols, "int8 codes");
    cuda::quantize_rows_int8(i8(codes, kOp, "codes"), f32(scale, kOp, "scale"), floats(x, kOp),
                             rows, cols, levels);
  }
  void dequantize_rows_int8(TensorView x, TensorView codes, TensorView scale) const override {
    constexpr const char* kOp = "dequantize_rows_int8";
    const int64_t rows = scale.numel();
    const int64_t cols = rows == 0 ? 0 : x.numel() / rows;
    check_numel(x, rows * cols, "dequantized x");
    check_numel(codes, rows * cols, "int8 codes");
    cuda::dequantize_rows_int8(floats(x, kOp), i8(codes, kOp, "codes"), f32(scale, kOp, "scale"),
                               rows, cols);
  }

  void add(TensorView out, TensorView a, TensorView b) const override {
    constexpr const char* kOp = "add";
    check_numel(a, out.numel(), "add a");
    check_numel(b, out.numel(), "add b");
    check_same_dtype_in_place(out, a, kOp);
    check_same_dtype_in_place(out, b, kOp);
    cuda::add(floats(out, kOp), floats(a, kOp), floats(b, kOp), out.numel());
  }
  void add_inplace(TensorView acc, TensorView x) const override {
    constexpr const char* kOp = "add_inplace";
    check_numel(x, acc.numel(), "add_inplace x");
    cuda::add_inplace(floats(acc, kOp), floats(x, kOp), acc.numel());
  }
  void scale(TensorView out, TensorView in, float alpha) const override {
    constexpr const char* kOp = "scale";
    check_numel(in, out.numel(), "scale input");
    check_same_dtype_in_place(out, in, kOp);
    cuda::scale(floats(out, kOp), floats(in, kOp), alpha, out.numel());
  }
  void fill_zero(TensorView x) const override {
    check_device(x);
    zero_bytes(x.raw(), x.bytes());
  }
  void sum_in_order(double* out, TensorView x) const override {
    cuda::sum_in_order(checked_readout(out, "sum_in_order"),
                       ConstDeviceFloats(f32(x, "sum_in_order", "x"), false), x.numel());
  }
  void sum_of_squares(double* out, TensorView x) const override {
    cuda::sum_of_squares(checked_readout(out, "sum_of_squares"), floats(x, "sum_of_squares"),
                         x.numel());
  }
  void count_arg_max_hits(double* out, TensorView logits, const int32_t* targets,
                          TensorView weights) const override {
    constexpr const char* kOp = "count_arg_max_hits";
    const auto [N, V] = readout_logits(logits, targets, kOp);
    check_numel(weights, N, "count_arg_max_hits weights");
    cuda::count_arg_max_hits(checked_readout(out, kOp),
                             ConstDeviceFloats(f32(logits, kOp, "logits"), false), targets,
                             f32(weights, kOp, "weights"), N, V);
  }
  void arg_max_rows(int32_t* ids, TensorView logits) const override {
    constexpr const char* kOp = "arg_max_rows";
    const auto [N, V] = readout_logits(logits, ids, kOp);
    cuda::arg_max_rows(ids, ConstDeviceFloats(f32(logits, kOp, "logits"), false), N, V);
  }
  void scale_by_ratio(TensorView x, float divisor, float multiplier) const override {
    cuda::scale_by_ratio(floats(x, "scale_by_ratio"), x.numel(), divisor, multiplier);
  }
  void copy(TensorView dst, TensorView src) const override {
    check_device(dst);
    check_device(src);
    check_numel(dst, src.numel(), "copy destination");
    if (dst.dtype() == src.dtype()) {
      // cudaMemcpy's ranges must not overlap: the only overlap a same-numel view can have with
      // itself that callers make is dst == src, a no-op.
      if (dst.raw() != src.raw()) copy_bytes(dst.raw(), src.raw(), src.bytes());
      return;
    }
    MAXCTX_CHECK(dst.dtype() != DType::kI8 && src.dtype() != DType::kI8,
                 "the cuda backend copies {} to {} only by int8 quantization",
                 dtype_name(src.dtype()), dtype_name(dst.dtype()));
    cuda::convert(floats(dst, "copy"), floats(src, "copy"), src.numel());
  }
  void adamw_update(TensorView params, TensorView grads, TensorView mu, TensorView nu,
                    const AdamWStep& step) const override {
    constexpr const char* kOp = "adamw_update";
    for (const TensorView* v : {&grads, &mu, &nu}) check_numel(*v, params.numel(), "AdamW");
    const AdamWConstants constants{
        step.b1,       step.b2,           step.one_minus_b1,  step.one_minus_b2, step.eps,
        step.eps_root, step.weight_decay, step.learning_rate, step.correction1,  step.correction2};
    cuda::adamw_update(floats(params, kOp), floats(grads, kOp), floats(mu, kOp), floats(nu, kOp),
                       params.numel(), constants);
  }

 private:
  mutable TransferCounter transfers_;
  static void matmul_backward_with(bool accumulate, TensorView d_in, TensorView d_weight,
                                   TensorView d_out, TensorView in, TensorView weight) {
    constexpr const char* kOp = "matmul_backward";
    const auto [out_dim, in_dim] = matrix_dims(weight);
    const int64_t N = rows_of(in, in_dim);
    check_numel(d_out, N * out_dim, "matmul d_out");
    check_numel(d_weight, out_dim * in_dim, "matmul d_weight");
    DeviceFloats d_in_data;  // empty d_in: the input gradient is skipped
    if (!d_in.empty()) {
      check_numel(d_in, N * in_dim, "matmul d_in");
      d_in_data = floats(d_in, kOp);
    }
    MAXCTX_CHECK(d_weight.dtype() == DType::kF32,
                 "matmul_backward accumulates d_weight in f32 only, got a {} d_weight",
                 dtype_name(d_weight.dtype()));
    cuda::matmul_backward(d_in_data, accumulate, f32(d_weight, kOp, "d_weight"), floats(d_out, kOp),
                          floats(in, kOp), floats(weight, kOp), N, in_dim, out_dim);
  }

  static void rope_with(const char* op, float sign, TensorView out, TensorView in, TensorView cos,
                        TensorView sin) {
    const auto [N, half] = matrix_dims(cos);
    check_numel(sin, N * half, "rope sin");
    MAXCTX_CHECK(half > 0, "rope needs an even head_dim > 0, got {}", 2 * half);
    const int64_t heads = rows_of(in, N * 2 * half);
    check_numel(out, in.numel(), "rope output");
    check_same_dtype_in_place(out, in, op);
    cuda::rope_rotate(floats(out, op), floats(in, op), f32(cos, op, "cos"), f32(sin, op, "sin"), N,
                      heads, 2 * half, sign);
  }
};

}  // namespace

const Kernels& cuda_kernels() {
  const CudaDevices devices = visible_cuda_devices();
  if (devices.count() == 0) {
    fail("the cuda backend needs a GPU: this process sees none ({})", devices.error);
  }
  static const CudaKernels kCuda;
  return kCuda;
}

}  // namespace maxctx::kernels::cuda
#endif  // MAXCTX_HAVE_CUDA

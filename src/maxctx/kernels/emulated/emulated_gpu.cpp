// The emulated GPU (emulated_gpu.h): an op table that takes the disguise off every view and
// index array and calls the cpu backend's same op; its memory is emulated_memory.h's.
#include "maxctx/kernels/emulated/emulated_gpu.h"

#include <cstring>
#include <utility>

#include "maxctx/core/check.h"
#include "maxctx/kernels/cpu/cpu_kernels.h"
#include "maxctx/kernels/emulated/emulated_memory.h"

namespace maxctx::kernels::emulated {
namespace {

// The cpu backend's view of an argument: views and index arrays undisguised, anything else
// (params, stats, int8 packs, which live in host memory as the cpu backend's own) passed as is.
struct OnHost {
  const char* op;
  TensorView operator()(TensorView v) const {  // by value: preferred over the template
    if (v.empty()) return v;
    MAXCTX_CHECK(v.device() == Device::kCuda, "emulated GPU: {} was given a {} tensor", op,
                 device_name(v.device()));
    return TensorView(host_address(v.raw(), op), v.dtype(), v.shape(), Device::kCpu);
  }
  const int32_t* operator()(const int32_t* ids) const {
    return static_cast<const int32_t*>(host_address(ids, op));
  }
  template <typename T>
  T&& operator()(T&& other) const {
    return std::forward<T>(other);
  }
};

// The body of every op: the cpu backend's same op on the undisguised arguments.
#define MAXCTX_EMULATED_OP(op, ...)                                        \
  return [this](const OnHost& on_host, auto&&... args) -> decltype(auto) { \
    return cpu_.op(on_host(std::forward<decltype(args)>(args))...);        \
  }(OnHost{#op}, __VA_ARGS__)

class EmulatedGpuKernels final : public Kernels {
 public:
  const char* name() const override { return "emulated-gpu"; }
  Device device() const override { return Device::kCuda; }
  const Allocator& allocator() const override { return allocator_; }

  void matmul_forward(TensorView out, TensorView in, TensorView weight) const override {
    MAXCTX_EMULATED_OP(matmul_forward, out, in, weight);
  }
  void matmul_backward(TensorView d_in, TensorView d_weight, TensorView d_out, TensorView in,
                       TensorView weight) const override {
    MAXCTX_EMULATED_OP(matmul_backward, d_in, d_weight, d_out, in, weight);
  }
  void matmul_backward_accumulate_input(TensorView d_in, TensorView d_weight, TensorView d_out,
                                        TensorView in, TensorView weight) const override {
    MAXCTX_EMULATED_OP(matmul_backward_accumulate_input, d_in, d_weight, d_out, in, weight);
  }
  void embedding_forward(TensorView out, const int32_t* tokens, TensorView table) const override {
    MAXCTX_EMULATED_OP(embedding_forward, out, tokens, table);
  }
  void embedding_backward(TensorView d_table, TensorView d_out,
                          const int32_t* tokens) const override {
    MAXCTX_EMULATED_OP(embedding_backward, d_table, d_out, tokens);
  }
  void rmsnorm_forward(TensorView out, TensorView rstd, TensorView in, TensorView weight,
                       float eps) const override {
    MAXCTX_EMULATED_OP(rmsnorm_forward, out, rstd, in, weight, eps);
  }
  void rmsnorm_backward(TensorView d_in, TensorView d_weight, TensorView d_out, TensorView in,
                        TensorView weight, TensorView rstd) const override {
    MAXCTX_EMULATED_OP(rmsnorm_backward, d_in, d_weight, d_out, in, weight, rstd);
  }
  void rope_cos_sin(TensorView cos, TensorView sin, const int32_t* positions,
                    const RopeParams& params) const override {
    MAXCTX_EMULATED_OP(rope_cos_sin, cos, sin, positions, params);
  }
  void rope_forward(TensorView out, TensorView in, TensorView cos, TensorView sin) const override {
    MAXCTX_EMULATED_OP(rope_forward, out, in, cos, sin);
  }
  void rope_backward(TensorView d_in, TensorView d_out, TensorView cos,
                     TensorView sin) const override {
    MAXCTX_EMULATED_OP(rope_backward, d_in, d_out, cos, sin);
  }
  void swiglu_forward(TensorView out, TensorView gate, TensorView up) const override {
    MAXCTX_EMULATED_OP(swiglu_forward, out, gate, up);
  }
  void swiglu_backward(TensorView d_gate, TensorView d_up, TensorView d_out, TensorView gate,
                       TensorView up) const override {
    MAXCTX_EMULATED_OP(swiglu_backward, d_gate, d_up, d_out, gate, up);
  }
  void cross_entropy_forward(TensorView loss, TensorView lse, TensorView logits,
                             const int32_t* targets, TensorView weights) const override {
    MAXCTX_EMULATED_OP(cross_entropy_forward, loss, lse, logits, targets, weights);
  }
  void cross_entropy_backward(TensorView d_logits, TensorView logits, TensorView lse,
                              const int32_t* targets, TensorView weights,
                              float d_loss) const override {
    MAXCTX_EMULATED_OP(cross_entropy_backward, d_logits, logits, lse, targets, weights, d_loss);
  }
  void attention_forward(TensorView out, TensorView lse, TensorView q, TensorView k, TensorView v,
                         const int32_t* q_pos, const int32_t* q_seg, const int32_t* k_pos,
                         const int32_t* k_seg, const AttentionParams& params,
                         AttentionStats* stats) const override {
    MAXCTX_EMULATED_OP(attention_forward, out, lse, q, k, v, q_pos, q_seg, k_pos, k_seg, params,
                       stats);
  }
  void attention_backward(TensorView dq, TensorView dk, TensorView dv, TensorView d_out,
                          TensorView out, TensorView lse, TensorView q, TensorView k, TensorView v,
                          const int32_t* q_pos, const int32_t* q_seg, const int32_t* k_pos,
                          const int32_t* k_seg, const AttentionParams& params,
                          AttentionStats* stats) const override {
    MAXCTX_EMULATED_OP(attention_backward, dq, dk, dv, d_out, out, lse, q, k, v, q_pos, q_seg,
                       k_pos, k_seg, params, stats);
  }
  void attention_merge(TensorView out, TensorView lse, TensorView out_a, TensorView lse_a,
                       TensorView out_b, TensorView lse_b, int64_t batch, int64_t seq_q,
                       int64_t heads_q, int64_t head_dim) const override {
    MAXCTX_EMULATED_OP(attention_merge, out, lse, out_a, lse_a, out_b, lse_b, batch, seq_q, heads_q,
                       head_dim);
  }
  void single_query_attention(TensorView out, TensorView lse, TensorView q, TensorView k,
                              TensorView v, const int32_t* q_pos, const int32_t* q_seg,
                              const int32_t* k_pos, const int32_t* k_seg,
                              const AttentionParams& params) const override {
    MAXCTX_EMULATED_OP(single_query_attention, out, lse, q, k, v, q_pos, q_seg, k_pos, k_seg,
                       params);
  }
  void single_query_attention_int8(TensorView out, TensorView lse, TensorView q, TensorView k_codes,
                                   TensorView k_scale, TensorView v_codes, TensorView v_scale,
                                   const int32_t* q_pos, const int32_t* q_seg, const int32_t* k_pos,
                                   const int32_t* k_seg,
                                   const AttentionParams& params) const override {
    MAXCTX_EMULATED_OP(single_query_attention_int8, out, lse, q, k_codes, k_scale, v_codes, v_scale,
                       q_pos, q_seg, k_pos, k_seg, params);
  }
  // The int8 packs are the backend's own host structures (kernels/types.h), as on the cpu.
  Int8Weights int8_pack_weights(TensorView weight) const override {
    MAXCTX_EMULATED_OP(int8_pack_weights, weight);
  }
  Int8Weights int8_pack_codes(TensorView codes, TensorView scale) const override {
    MAXCTX_EMULATED_OP(int8_pack_codes, codes, scale);
  }
  void int8_quantize_rows(Int8Rows& rows, TensorView in) const override {
    MAXCTX_EMULATED_OP(int8_quantize_rows, rows, in);
  }
  void int8_matmul_forward(TensorView out, const Int8Rows& rows,
                           const Int8Weights& weight) const override {
    MAXCTX_EMULATED_OP(int8_matmul_forward, out, rows, weight);
  }
  void quantize_rows_int8(TensorView codes, TensorView scale, TensorView x,
                          float levels) const override {
    MAXCTX_EMULATED_OP(quantize_rows_int8, codes, scale, x, levels);
  }
  void dequantize_rows_int8(TensorView x, TensorView codes, TensorView scale) const override {
    MAXCTX_EMULATED_OP(dequantize_rows_int8, x, codes, scale);
  }
  void add(TensorView out, TensorView a, TensorView b) const override {
    MAXCTX_EMULATED_OP(add, out, a, b);
  }
  void add_inplace(TensorView acc, TensorView x) const override {
    MAXCTX_EMULATED_OP(add_inplace, acc, x);
  }
  void scale(TensorView out, TensorView in, float alpha) const override {
    MAXCTX_EMULATED_OP(scale, out, in, alpha);
  }
  void fill_zero(TensorView x) const override { MAXCTX_EMULATED_OP(fill_zero, x); }
  double sum_of_squares(TensorView x) const override { MAXCTX_EMULATED_OP(sum_of_squares, x); }
  void copy(TensorView dst, TensorView src) const override { MAXCTX_EMULATED_OP(copy, dst, src); }
  void adamw_update(TensorView params, TensorView grads, TensorView mu, TensorView nu,
                    const AdamWStep& step) const override {
    MAXCTX_EMULATED_OP(adamw_update, params, grads, mu, nu, step);
  }

 private:
  const Kernels& cpu_ = cpu::cpu_kernels();
  const Allocator& allocator_ = emulated_allocator();
};

#undef MAXCTX_EMULATED_OP

}  // namespace

bool is_disguised(const void* memory) {
  return (reinterpret_cast<uintptr_t>(memory) & kDisguiseBit) != 0;
}

void* host_address(const void* memory, const char* what) {
  if (memory == nullptr) return nullptr;
  MAXCTX_CHECK(is_disguised(memory),
               "emulated GPU: {} was given host memory ({}) where device memory belongs", what,
               memory);
  return reinterpret_cast<void*>(reinterpret_cast<uintptr_t>(memory) & ~kDisguiseBit);
}

const Kernels& emulated_gpu_kernels() {
  static const EmulatedGpuKernels& kEmulated = *new EmulatedGpuKernels();
  return kEmulated;
}

}  // namespace maxctx::kernels::emulated

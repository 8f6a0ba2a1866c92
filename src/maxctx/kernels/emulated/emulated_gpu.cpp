// The emulated GPU (emulated_gpu.h): an op table that takes the disguise off every view and
// index array and calls the cpu backend's same op; its memory is emulated_memory.h's.
#include "maxctx/kernels/emulated/emulated_gpu.h"

#include <cstring>
#include <utility>

#include "maxctx/core/check.h"
#include "maxctx/kernels/cpu/cpu_kernels.h"
#include "maxctx/kernels/emulated/emulated_memory.h"
#include "maxctx/kernels/emulated/late_downloads.h"
#include "maxctx/kernels/transfer_counter.h"
#include "maxctx/kernels/view_checks.h"

namespace maxctx::kernels::emulated {
namespace {

// The cpu backend's view of an argument: views, index arrays and readout arrays undisguised,
// anything else (params, stats, int8 packs, which live in host memory as the cpu backend's own)
// passed as is.
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
  int32_t* operator()(int32_t* ids) const { return static_cast<int32_t*>(host_address(ids, op)); }
  double* operator()(double* out) const { return static_cast<double*>(host_address(out, op)); }
  template <typename T>
  T&& operator()(T&& other) const {
    return std::forward<T>(other);
  }
};

// Every op of the op list as the cpu backend's same op on the undisguised arguments. The int8
// packs are the backend's own host structures (kernels/types.h), as on the cpu.
class OnCpuKernels : public Kernels {
 public:
  const char* name() const override { return "emulated-gpu"; }
  Device device() const override { return Device::kCuda; }
  const Allocator& allocator() const override { return allocator_; }

#define MAXCTX_KERNEL_OP(result, op, params, args)                  \
  result op params const override {                                 \
    const OnHost on_host{#op};                                      \
    return [&](auto&&... arg) -> result {                           \
      return cpu_.op(on_host(std::forward<decltype(arg)>(arg))...); \
    } args;                                                         \
  }
#include "maxctx/kernels/kernel_ops.inc"
#undef MAXCTX_KERNEL_OP

 private:
  const Kernels& cpu_ = cpu::cpu_kernels();
  const Allocator& allocator_ = emulated_allocator();
};

// What a GPU refuses and the cpu does not is refused here too (the checks of view_checks.h that
// the cuda backend makes before a launch), so that such a call fails in CI as well.
class EmulatedGpuKernels final : public OnCpuKernels {
 public:
  // Downloads arrive as late as on a GPU (late_downloads.h); everything else has finished when
  // its call returns, uploads included.
  // Every readback and wait is counted as a GPU's would cost one (transfer_counts).
  void synchronize() const override {
    transfers_.wait();
    downloads_.deliver_all();
  }
  Event record_event() const override { return downloads_.mark(); }
  Event copy_to_host_async(void* host, const void* backend_memory, size_t bytes) const override {
    MAXCTX_CHECK(!is_disguised(host), "emulated GPU: copy_to_host_async into device memory");
    transfers_.download(/*waits=*/false);
    return downloads_.download(host, host_address(backend_memory, "copy_to_host_async"), bytes);
  }
  void offload_to_host_async(void* host, const void* backend_memory, size_t bytes) const override {
    MAXCTX_CHECK(!is_disguised(host), "emulated GPU: offload_to_host_async into device memory");
    transfers_.offload();
    // Lands at the next synchronize(), like any asynchronous download: the backward's restore
    // must come after one.
    downloads_.download(host, host_address(backend_memory, "offload_to_host_async"), bytes);
  }
  void copy_to_host(void* host, const void* backend_memory, size_t bytes) const override {
    transfers_.download(/*waits=*/true);
    OnCpuKernels::copy_to_host(host, backend_memory, bytes);
  }
  std::optional<TransferCounts> transfer_counts() const override { return transfers_.read(); }

  void attention_forward(TensorView out, TensorView lse, TensorView q, TensorView k, TensorView v,
                         const int32_t* q_pos, const int32_t* q_seg, const int32_t* k_pos,
                         const int32_t* k_seg, const AttentionParams& params,
                         AttentionStats* stats) const override {
    check_attention_alignment(q, k, v, params, "attention_forward");
    OnCpuKernels::attention_forward(out, lse, q, k, v, q_pos, q_seg, k_pos, k_seg, params, stats);
  }
  void attention_backward(TensorView dq, TensorView dk, TensorView dv, TensorView d_out,
                          TensorView out, TensorView lse, TensorView q, TensorView k, TensorView v,
                          const int32_t* q_pos, const int32_t* q_seg, const int32_t* k_pos,
                          const int32_t* k_seg, const AttentionParams& params,
                          AttentionStats* stats) const override {
    check_attention_alignment(q, k, v, params, "attention_backward");
    OnCpuKernels::attention_backward(dq, dk, dv, d_out, out, lse, q, k, v, q_pos, q_seg, k_pos,
                                     k_seg, params, stats);
  }

 private:
  mutable LateDownloads downloads_;
  mutable TransferCounter transfers_;
};

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

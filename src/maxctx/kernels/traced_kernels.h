// A Kernels that runs another backend's ops inside trace spans (core/trace.h), one span per op
// call named after the op, category compute. The seam where the model, parallel/, infer/ and
// train/ call the op table is the one place that sees every compute op, so wrapping it traces
// them all without touching any caller.
//
// What it is not: a backend. Memory, names and devices are the inner backend's, so tensors move
// freely between the two. Used only while a profiler is configured (trainer, inference); a run
// without one never goes through this extra virtual call. A GPU backend records its own
// device-side spans (trace::record) from its kernels; this wrapper gives the host-side view.
#pragma once

#include "maxctx/core/trace.h"
#include "maxctx/kernels/kernels.h"

namespace maxctx::kernels {

class TracedKernels final : public Kernels {
 public:
  explicit TracedKernels(const Kernels& inner) : inner_(inner) {}

  const char* name() const override { return inner_.name(); }
  Device device() const override { return inner_.device(); }
  const Allocator& allocator() const override { return inner_.allocator(); }
  void synchronize() const override { inner_.synchronize(); }
  Event record_event() const override { return inner_.record_event(); }
  Stream stream() const override { return inner_.stream(); }
  void copy_to_host(void* host, const void* backend_memory, size_t bytes) const override {
    inner_.copy_to_host(host, backend_memory, bytes);
  }
  void copy_from_host(void* backend_memory, const void* host, size_t bytes) const override {
    inner_.copy_from_host(backend_memory, host, bytes);
  }
  std::optional<TransferCounts> transfer_counts() const override {
    return inner_.transfer_counts();
  }
  void copy_from_host_async(void* backend_memory, const void* host, size_t bytes) const override {
    inner_.copy_from_host_async(backend_memory, host, bytes);
  }
  void offload_to_host_async(void* host, const void* backend_memory, size_t bytes) const override {
    inner_.offload_to_host_async(host, backend_memory, bytes);
  }
  Event copy_to_host_async(void* host, const void* backend_memory, size_t bytes) const override {
    return inner_.copy_to_host_async(host, backend_memory, bytes);
  }

  // Every op of the op list: a span named after the op around the inner backend's same op with
  // the same arguments (`return` passes a result through and is allowed on a void call).
#define MAXCTX_KERNEL_OP(result, op, params, args)          \
  result op params const override {                         \
    const trace::Span span(#op, trace::Category::kCompute); \
    return inner_.op args;                                  \
  }
#include "maxctx/kernels/kernel_ops.inc"
#undef MAXCTX_KERNEL_OP

 private:
  const Kernels& inner_;
};

// The traced wrapper of `inner`, made once per backend and kept for the life of the process.
const Kernels& traced(const Kernels& inner);

}  // namespace maxctx::kernels

// Float values between host vectors and a backend's tensors of any float dtype, through the
// backend's allocator (Kernels::copy_to_host/copy_from_host) and its copy op (the dtype
// conversion). For loading, checkpoints and logging: code above kernels/ never reads or writes
// a tensor's memory itself, since on a GPU the host cannot touch it.
//
// The conversion is the backend's copy op on the backend's memory, exactly as a copy from a host
// view was before, so the cpu backend's bits are unchanged (f32 → bf16 rounds to nearest even).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "maxctx/kernels/kernels.h"

namespace maxctx::kernels {

// dst (any float dtype, the backend's memory) = values (dst.numel() of them).
void upload_floats(const Kernels& kernels, TensorView dst, std::span<const float> values);
// The elements of `src` (any float dtype, the backend's memory) as f32 on the host.
std::vector<float> download_floats(const Kernels& kernels, TensorView src);

// A view of `src` (any dtype) readable on the host: `src` itself where the backend's memory is
// the host's, a downloaded copy held here otherwise. Checkpoint writes read the model through
// it: on the cpu a copy would hold the whole state a second time.
class HostView {
 public:
  HostView(const Kernels& kernels, TensorView src);
  HostView(const HostView&) = delete;
  HostView& operator=(const HostView&) = delete;
  TensorView view() const { return view_; }

 private:
  Tensor copy_;  // empty when view_ is the backend's own memory
  TensorView view_;
};

// An f32 view's elements readable on the host, for the step's readouts (token losses, the
// accuracy's logits, the gradient norm): the memory itself where the backend's memory is the
// host's (cpu: no copy in the step), a downloaded copy held here otherwise.
class HostFloats {
 public:
  HostFloats(const Kernels& kernels, TensorView src);
  HostFloats(const HostFloats&) = delete;
  HostFloats& operator=(const HostFloats&) = delete;
  std::span<const float> span() const { return span_; }
  float operator[](size_t i) const { return span_[i]; }

 private:
  HostView host_;
  std::span<const float> span_;
};

// A host tensor holding `src`'s elements (same dtype and shape), and the reverse: a tensor of
// `kernels` holding a host view's (checkpoints are read and written through these).
Tensor to_host(const Kernels& kernels, TensorView src);
Tensor to_backend(const Kernels& kernels, TensorView host);

// int32 index arrays (token ids, positions, segment ids) in the backend's memory, which has no
// int32 tensor dtype: a buffer of the backend and a pointer into it.
class DeviceIndices {
 public:
  DeviceIndices() = default;
  // A copy of `host` in `kernels`' memory.
  DeviceIndices(const Kernels& kernels, std::span<const int32_t> host);
  // Replaces the contents with `host`, growing the buffer when needed.
  void upload(const Kernels& kernels, std::span<const int32_t> host);
  // Elements [offset, offset + host.size()) = host, inside the current contents.
  void write(const Kernels& kernels, int64_t offset, std::span<const int32_t> host);
  const int32_t* data() const { return reinterpret_cast<const int32_t*>(buffer_.data()); }
  int64_t size() const { return size_; }

 private:
  AlignedBuffer buffer_;
  int64_t size_ = 0;
};

}  // namespace maxctx::kernels

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

// A few doubles in the backend's memory that the readout ops write (kernel_ops.inc: the loss
// sum, the accuracy's hits, the gradient norm's terms), read back together in one copy: the
// step's readouts cost one transfer, not one per value.
class DeviceDoubles {
 public:
  DeviceDoubles() = default;
  // At least `count` slots in `kernels`' memory (reallocated when smaller; kept otherwise).
  void reserve(const Kernels& kernels, int64_t count);
  // Slot i, a device address for a readout op's `out`.
  double* slot(int64_t i);
  int64_t capacity() const { return static_cast<int64_t>(buffer_.size() / sizeof(double)); }
  // Slots [0, count) on the host: one readback.
  std::vector<double> read(const Kernels& kernels, int64_t count) const;

 private:
  AlignedBuffer buffer_;
};

}  // namespace maxctx::kernels

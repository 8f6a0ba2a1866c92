#include "maxctx/kernels/host_transfer.h"

#include "maxctx/core/check.h"

namespace maxctx::kernels {

void upload_floats(const Kernels& kernels, TensorView dst, std::span<const float> values) {
  MAXCTX_CHECK_EQ(static_cast<int64_t>(values.size()), dst.numel(), "upload_floats: values");
  if (dst.dtype() == DType::kF32) {
    kernels.copy_from_host(dst.raw(), values.data(), values.size_bytes());
    return;
  }
  const Tensor staged = kernels.empty({dst.numel()}, DType::kF32);
  kernels.copy_from_host(staged.view().raw(), values.data(), values.size_bytes());
  kernels.copy(dst, staged.view());
}

std::vector<float> download_floats(const Kernels& kernels, TensorView src) {
  std::vector<float> values(static_cast<size_t>(src.numel()));
  if (src.dtype() == DType::kF32) {
    kernels.copy_to_host(values.data(), src.raw(), src.bytes());
    return values;
  }
  const Tensor widened = kernels.empty({src.numel()}, DType::kF32);
  kernels.copy(widened.view(), src);
  kernels.copy_to_host(values.data(), widened.view().raw(), widened.view().bytes());
  return values;
}

HostView::HostView(const Kernels& kernels, TensorView src) {
  if (kernels.device() == Device::kCpu) {
    view_ = src;
    return;
  }
  copy_ = to_host(kernels, src);
  view_ = copy_.view();
}

Tensor to_host(const Kernels& kernels, TensorView src) {
  Tensor host(src.shape(), src.dtype());
  kernels.copy_to_host(host.view().raw(), src.raw(), src.bytes());
  return host;
}

Tensor to_backend(const Kernels& kernels, TensorView host) {
  MAXCTX_CHECK(host.device() == Device::kCpu, "to_backend takes a host view, got {}",
               device_name(host.device()));
  Tensor out = kernels.empty(host.shape(), host.dtype());
  kernels.copy_from_host(out.view().raw(), host.raw(), host.bytes());
  return out;
}

DeviceIndices::DeviceIndices(const Kernels& kernels, std::span<const int32_t> host) {
  upload(kernels, host);
}

void DeviceIndices::upload(const Kernels& kernels, std::span<const int32_t> host) {
  if (buffer_.size() < host.size_bytes() || buffer_.device() != kernels.device()) {
    buffer_ = AlignedBuffer(host.size_bytes(), kernels.allocator());
  }
  // Staged and ordered on the backend's stream: no device-wide wait per upload (a ring step's).
  kernels.copy_from_host_async(buffer_.data(), host.data(), host.size_bytes());
  size_ = static_cast<int64_t>(host.size());
}

void DeviceIndices::write(const Kernels& kernels, int64_t offset, std::span<const int32_t> host) {
  MAXCTX_CHECK(offset >= 0 && offset + static_cast<int64_t>(host.size()) <= size_,
               "index write [{}, {}) outside {} elements", offset,
               offset + static_cast<int64_t>(host.size()), size_);
  kernels.copy_from_host_async(buffer_.data() + offset * static_cast<int64_t>(sizeof(int32_t)),
                               host.data(), host.size_bytes());
}

void DeviceDoubles::reserve(const Kernels& kernels, int64_t count) {
  MAXCTX_CHECK_GE(count, 0, "DeviceDoubles: a negative count");
  if (capacity() >= count && buffer_.device() == kernels.device()) return;
  buffer_ = AlignedBuffer(static_cast<size_t>(count) * sizeof(double), kernels.allocator());
}

double* DeviceDoubles::slot(int64_t i) {
  MAXCTX_CHECK(i >= 0 && i < capacity(), "DeviceDoubles: slot {} of {}", i, capacity());
  return reinterpret_cast<double*>(buffer_.data()) + i;
}

std::vector<double> DeviceDoubles::read(const Kernels& kernels, int64_t count) const {
  MAXCTX_CHECK(count >= 0 && count <= capacity(), "DeviceDoubles: {} slots of {}", count,
               capacity());
  std::vector<double> values(static_cast<size_t>(count));
  if (count > 0)
    kernels.copy_to_host(values.data(), buffer_.data(), values.size() * sizeof(double));
  return values;
}

}  // namespace maxctx::kernels

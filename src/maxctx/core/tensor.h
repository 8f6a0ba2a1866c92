// Tensor views and owning tensors: row-major, contiguous, up to 6 dims.
//
// A TensorView is a pointer, a dtype, a device and a shape; it never owns memory and is cheap to
// copy. A Tensor owns a 64-byte-aligned buffer from an Allocator (a backend's device memory, the
// host's by default) and hands out views of it. The op table (kernels/kernels.h) takes views and
// dispatches on their dtype and device; model, parallel and infer code pass tensors around as
// views with their shapes checked at the boundary.
#pragma once

#include <array>
#include <cstdint>
#include <initializer_list>
#include <span>
#include <string>
#include <type_traits>

#include "maxctx/core/buffer.h"
#include "maxctx/core/check.h"
#include "maxctx/core/device.h"
#include "maxctx/core/dtype.h"

namespace maxctx {

inline constexpr int kMaxDims = 6;

class Shape {
 public:
  Shape() = default;
  Shape(std::initializer_list<int64_t> dims);

  int rank() const { return rank_; }
  int64_t operator[](int dim) const;
  int64_t numel() const;
  std::string to_string() const;  // "(2, 3, 4)"
  bool operator==(const Shape& other) const;

 private:
  std::array<int64_t, kMaxDims> dims_{};
  int rank_ = 0;
};

template <typename T>
constexpr DType dtype_of() {
  if constexpr (std::is_same_v<T, float>) return DType::kF32;
  if constexpr (std::is_same_v<T, bf16>) return DType::kBF16;
  if constexpr (std::is_same_v<T, int8_t>) return DType::kI8;
}

class TensorView {
 public:
  TensorView() = default;
  TensorView(void* data, DType dtype, Shape shape, Device device = Device::kCpu)
      : data_(data), dtype_(dtype), device_(device), shape_(shape) {}
  // A host array viewed as a 1-D fp32 tensor (the pointer's constness is the caller's promise).
  static TensorView of(const float* data, int64_t count) {
    return TensorView(const_cast<float*>(data), DType::kF32, Shape{count});
  }

  DType dtype() const { return dtype_; }
  Device device() const { return device_; }
  bool empty() const { return data_ == nullptr; }
  const Shape& shape() const { return shape_; }
  int64_t numel() const { return shape_.numel(); }
  size_t bytes() const { return static_cast<size_t>(numel()) * dtype_size(dtype_); }
  void* raw() const { return data_; }

  template <typename T>
  T* data() const {
    MAXCTX_CHECK(dtype_of<T>() == dtype_, "tensor holds {}, accessed as {}", dtype_name(dtype_),
                 dtype_name(dtype_of<T>()));
    return static_cast<T*>(data_);
  }
  template <typename T>
  std::span<T> span() const {
    return {data<T>(), static_cast<size_t>(numel())};
  }

  // The same memory under another shape with the same element count.
  TensorView reshaped(Shape shape) const;
  // Rows [begin, end) along dim 0.
  TensorView rows(int64_t begin, int64_t end) const;
  // Elements [begin, begin + count) in memory order, as a 1-D view.
  TensorView elements(int64_t begin, int64_t count) const {
    return reshaped(Shape{numel()}).rows(begin, begin + count);
  }

 private:
  void* data_ = nullptr;
  DType dtype_ = DType::kF32;
  Device device_ = Device::kCpu;
  Shape shape_;
};

class Tensor {
 public:
  Tensor() = default;
  Tensor(Shape shape, DType dtype = DType::kF32, const Allocator& allocator = host_allocator(),
         Residency residency = Residency::kCommitted);

  const TensorView& view() const { return view_; }
  // The first `count` rows along dim 0 (a workspace sized for the most rows, used for fewer).
  TensorView rows(int64_t count) const { return view_.rows(0, count); }
  Device device() const { return view_.device(); }
  DType dtype() const { return view_.dtype(); }
  const Shape& shape() const { return view_.shape(); }
  int64_t numel() const { return view_.numel(); }
  template <typename T>
  T* data() const {
    return view_.data<T>();
  }
  template <typename T>
  std::span<T> span() const {
    return view_.span<T>();
  }

 private:
  AlignedBuffer buffer_;
  TensorView view_;
};

}  // namespace maxctx

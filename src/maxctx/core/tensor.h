// Tensor views and owning tensors: row-major, contiguous, up to 6 dims.
//
// A TensorView is a pointer, a dtype and a shape; it never owns memory and is cheap to copy.
// A Tensor owns a 64-byte-aligned buffer and hands out views of it. Kernels take raw pointers
// and dims (llm.c style); views are how model, parallel and io code pass tensors around with
// their shapes checked at the boundary.
#pragma once

#include <array>
#include <cstdint>
#include <initializer_list>
#include <span>
#include <string>
#include <type_traits>

#include "maxctx/core/buffer.h"
#include "maxctx/core/check.h"
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
  TensorView(void* data, DType dtype, Shape shape) : data_(data), dtype_(dtype), shape_(shape) {}

  DType dtype() const { return dtype_; }
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

 private:
  void* data_ = nullptr;
  DType dtype_ = DType::kF32;
  Shape shape_;
};

class Tensor {
 public:
  Tensor() = default;
  Tensor(Shape shape, DType dtype = DType::kF32);

  const TensorView& view() const { return view_; }
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

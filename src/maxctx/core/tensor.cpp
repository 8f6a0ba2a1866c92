#include "maxctx/core/tensor.h"

#include <fmt/format.h>

namespace maxctx {

Shape::Shape(std::initializer_list<int64_t> dims) {
  MAXCTX_CHECK_LE(static_cast<int>(dims.size()), kMaxDims, "shape has too many dims");
  for (int64_t d : dims) {
    MAXCTX_CHECK_GE(d, 0, "dims must be non-negative");
    dims_[rank_++] = d;
  }
}

int64_t Shape::operator[](int dim) const {
  MAXCTX_CHECK(dim >= 0 && dim < rank_, "dim {} out of range for rank {}", dim, rank_);
  return dims_[dim];
}

int64_t Shape::numel() const {
  int64_t n = 1;
  for (int i = 0; i < rank_; ++i) n *= dims_[i];
  return n;
}

std::string Shape::to_string() const {
  std::string out = "(";
  for (int i = 0; i < rank_; ++i) out += fmt::format("{}{}", i ? ", " : "", dims_[i]);
  return out + ")";
}

bool Shape::operator==(const Shape& other) const {
  if (rank_ != other.rank_) return false;
  for (int i = 0; i < rank_; ++i) {
    if (dims_[i] != other.dims_[i]) return false;
  }
  return true;
}

TensorView TensorView::reshaped(Shape shape) const {
  MAXCTX_CHECK_EQ(shape.numel(), numel(), "reshape {} -> {} changes the element count",
                  shape_.to_string(), shape.to_string());
  return TensorView(data_, dtype_, shape, device_);
}

TensorView TensorView::rows(int64_t begin, int64_t end) const {
  MAXCTX_CHECK(shape_.rank() >= 1 && 0 <= begin && begin <= end && end <= shape_[0],
               "rows [{}, {}) of a tensor of shape {}", begin, end, shape_.to_string());
  const int64_t row_elements = shape_[0] == 0 ? 0 : numel() / shape_[0];
  Shape sub;
  switch (shape_.rank()) {
    case 1:
      sub = Shape{end - begin};
      break;
    case 2:
      sub = Shape{end - begin, shape_[1]};
      break;
    case 3:
      sub = Shape{end - begin, shape_[1], shape_[2]};
      break;
    case 4:
      sub = Shape{end - begin, shape_[1], shape_[2], shape_[3]};
      break;
    case 5:
      sub = Shape{end - begin, shape_[1], shape_[2], shape_[3], shape_[4]};
      break;
    default:
      sub = Shape{end - begin, shape_[1], shape_[2], shape_[3], shape_[4], shape_[5]};
  }
  auto* base = static_cast<std::byte*>(data_) + begin * row_elements * dtype_size(dtype_);
  return TensorView(base, dtype_, sub, device_);
}

Tensor::Tensor(Shape shape, DType dtype, const Allocator& allocator, Residency residency)
    : buffer_(static_cast<size_t>(shape.numel()) * dtype_size(dtype), allocator, residency),
      view_(buffer_.data(), dtype, shape, allocator.device()) {}

}  // namespace maxctx

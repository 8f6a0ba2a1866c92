#include "maxctx/core/tensor.h"

#include <gtest/gtest.h>

#include <cstdint>

namespace maxctx {
namespace {

TEST(Tensor, AlignedAndZeroed) {
  Tensor t(Shape{3, 5, 7});
  EXPECT_EQ(reinterpret_cast<uintptr_t>(t.data<float>()) % kBufferAlignment, 0u);
  EXPECT_EQ(t.numel(), 105);
  for (float v : t.span<float>()) EXPECT_EQ(v, 0.0f);
  EXPECT_EQ(t.shape().to_string(), "(3, 5, 7)");
}

TEST(Tensor, RowsAndReshapeShareMemory) {
  Tensor t(Shape{4, 3});
  for (int i = 0; i < 12; ++i) t.data<float>()[i] = static_cast<float>(i);
  TensorView middle = t.view().rows(1, 3);
  EXPECT_EQ(middle.shape(), (Shape{2, 3}));
  EXPECT_EQ(middle.data<float>()[0], 3.0f);
  TensorView flat = t.view().reshaped(Shape{12});
  EXPECT_EQ(flat.data<float>()[11], 11.0f);
}

TEST(Tensor, TypedAccessChecksDType) {
  Tensor t(Shape{2}, DType::kBF16);
  EXPECT_EQ(t.view().bytes(), 4u);
  set_check_handler([](const std::string& message) { throw Error(message); });
  EXPECT_THROW(t.data<float>(), Error);
  EXPECT_THROW(t.view().reshaped(Shape{3}), Error);
  set_check_handler({});
}

}  // namespace
}  // namespace maxctx

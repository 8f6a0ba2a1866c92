#include "maxctx/core/tensor.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <utility>
#include <vector>

#include "maxctx/core/page_range.h"

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

namespace maxctx {
namespace {

TEST(PageRange, OverlappingInsideAndThePartialEnds) {
  // [100, 8292) over 4096-byte pages: pages 0..2 hold a byte of it, page 1 alone lies inside;
  // the bytes of pages 0 and 2 in the range are the partial ends.
  EXPECT_EQ(pages_overlapping(100, 8292, 4096).first, 0u);
  EXPECT_EQ(pages_overlapping(100, 8292, 4096).last, 3u);
  EXPECT_EQ(pages_inside(100, 8292, 4096).first, 1u);
  EXPECT_EQ(pages_inside(100, 8292, 4096).last, 2u);
  const auto ends = [](size_t begin, size_t end) {
    std::vector<std::pair<size_t, size_t>> runs;
    for_each_partial_end(begin, end, 4096, [&](size_t from, size_t to) {
      runs.push_back({from, to});
    });
    return runs;
  };
  using Runs = std::vector<std::pair<size_t, size_t>>;
  EXPECT_EQ(ends(100, 8292), (Runs{{100, 4096}, {8192, 8292}}));
  EXPECT_EQ(ends(4096, 8192), Runs{});                              // whole pages only
  EXPECT_EQ(ends(100, 200), (Runs{{100, 200}}));                    // inside one page
  EXPECT_EQ(ends(4000, 4200), (Runs{{4000, 4096}, {4096, 4200}}));  // across a boundary
}

TEST(HostAllocator, DecommitZeroesTheRangeAndHandsBackItsWholePages) {
  const Allocator& host = host_allocator();
  const size_t bytes = size_t{4} << 20;  // a mapping of its own
  auto* memory = static_cast<unsigned char*>(host.allocate(bytes));
  std::fill(memory, memory + bytes, 1);
  const size_t begin = 100, end = 3 * 4096 + 50;
  host.decommit(memory + begin, end - begin);
  // Pages 1 and 2 went back (asked before reading them, which maps the zero page in again).
  EXPECT_EQ(host.resident_bytes(memory + 4096, 2 * 4096), 0u);
  for (size_t i = 0; i < 5 * 4096; ++i) {
    ASSERT_EQ(memory[i], i >= begin && i < end ? 0 : 1) << i;
  }
  host.commit(memory + begin, end - begin);  // free on the host
  EXPECT_FALSE(host.committed_bytes().has_value());
  host.deallocate(memory, bytes);
}

}  // namespace
}  // namespace maxctx

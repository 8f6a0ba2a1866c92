// Slice files written straight from a buffer laid out as the file (write_laid_out_slice_file,
// the checkpoint stager's path): the same tensors as the streamed writer, a data section on a
// 4 KiB boundary, the padding cut off, on a file system with direct I/O and on one without.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <string>
#include <vector>

#include "io/temp_dir.h"
#include "maxctx/core/check.h"
#include "maxctx/io/safetensors.h"
#include "maxctx/io/sliced_tensors.h"

namespace maxctx::io {
namespace {

namespace fs = std::filesystem;

// Three slices of a [10, 700] f32 tensor and a [3000] bf16 vector, laid out in key order in an
// aligned buffer (as the stager does), with the padding past the data filled with a marker that
// must not reach the file.
struct LaidOut {
  std::unique_ptr<std::byte, decltype(&std::free)> buffer{nullptr, &std::free};
  std::vector<SliceToWrite> slices;
  size_t size = 0;
};
LaidOut lay_out() {
  struct Part {
    std::string tensor;
    StDType dtype;
    std::vector<int64_t> shape;
    Rect rect;
  };
  std::vector<Part> parts = {{"w", StDType::kF32, {10, 700}, {0, 0, 4, 700}},
                             {"w", StDType::kF32, {10, 700}, {4, 0, 6, 700}},
                             {"adam_m.v", StDType::kBF16, {3000}, {0, 0, 3000, 1}}};
  std::sort(parts.begin(), parts.end(), [](const Part& a, const Part& b) {
    return slice_key({a.tensor, a.dtype, a.shape, a.rect, {}}) <
           slice_key({b.tensor, b.dtype, b.shape, b.rect, {}});
  });
  LaidOut out;
  for (const Part& p : parts)
    out.size += static_cast<size_t>(p.rect.numel()) * element_size(p.dtype);
  const size_t capacity = (out.size / kDirectIoAlignment + 1) * kDirectIoAlignment;
  out.buffer.reset(static_cast<std::byte*>(std::aligned_alloc(kDirectIoAlignment, capacity)));
  std::memset(out.buffer.get() + out.size, 0x5a, capacity - out.size);
  std::byte* next = out.buffer.get();
  for (const Part& p : parts) {
    const size_t bytes = static_cast<size_t>(p.rect.numel()) * element_size(p.dtype);
    for (size_t i = 0; i < bytes; ++i) next[i] = static_cast<std::byte>((i * 7 + p.rect.row) % 251);
    out.slices.push_back({p.tensor, p.dtype, p.shape, p.rect, {next, bytes}});
    next += bytes;
  }
  return out;
}

std::string file_bytes(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), {}};
}

void expect_same_tensors(const fs::path& laid_out, const fs::path& streamed, const LaidOut& data) {
  const SafetensorsFile a(laid_out);
  const SafetensorsFile b(streamed);
  EXPECT_EQ(a.data_offset() % kDirectIoAlignment, 0u);
  EXPECT_EQ(fs::file_size(laid_out), a.data_offset() + data.size);  // padding cut off
  for (const SliceToWrite& s : data.slices) {
    const TensorInfo& x = a.info(slice_key(s));
    const TensorInfo& y = b.info(slice_key(s));
    EXPECT_EQ(x.shape, y.shape);
    EXPECT_EQ(x.dtype, y.dtype);
    const std::string bytes = file_bytes(laid_out);
    ASSERT_EQ(x.end - x.begin, s.data.size());
    EXPECT_EQ(std::memcmp(bytes.data() + a.data_offset() + x.begin, s.data.data(), s.data.size()),
              0)
        << slice_key(s);
  }
}

void check_writes_like_the_streamed_writer(const fs::path& dir) {
  const LaidOut data = lay_out();
  std::vector<uint64_t> chunks;
  const SliceIndex index =
      write_laid_out_slice_file(dir / "laid_out.safetensors", data.slices,
                                {data.buffer.get(), data.size}, [&](uint64_t done, uint64_t total) {
                                  EXPECT_EQ(total, data.size);
                                  chunks.push_back(done);
                                });
  write_slice_file(dir / "streamed.safetensors", data.slices);
  expect_same_tensors(dir / "laid_out.safetensors", dir / "streamed.safetensors", data);
  // Called in the middle too (the crash tests kill a save there).
  ASSERT_GE(chunks.size(), 2u);
  EXPECT_GT(chunks[1], 0u);
  EXPECT_LT(chunks[1], data.size);
  // The index's byte ranges are the file's: reading a slice through them gives its bytes.
  const std::string bytes = file_bytes(dir / "laid_out.safetensors");
  for (const SliceToWrite& s : data.slices) {
    const SliceLocation& where = index.at(s.tensor).slices.at(s.rect.row == 4 ? 1 : 0);
    EXPECT_EQ(std::memcmp(bytes.data() + where.byte_begin, s.data.data(), s.data.size()), 0);
  }
  EXPECT_FALSE(fs::exists(dir / "laid_out.safetensors.tmp"));
}

TEST(LaidOutSliceFile, WritesTheStreamedWritersTensorsByDirectIo) {
  TempDir dir;
  check_writes_like_the_streamed_writer(dir.path());
}

TEST(LaidOutSliceFile, WritesThroughThePageCacheWhereDirectIoIsRefused) {
  // tmpfs refuses O_DIRECT at open.
  if (!fs::is_directory("/dev/shm")) GTEST_SKIP() << "no /dev/shm (tmpfs) on this machine";
  const fs::path dir = fs::path("/dev/shm") / ("maxctx_laid_out_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  check_writes_like_the_streamed_writer(dir);
  fs::remove_all(dir);
}

TEST(LaidOutSliceFile, RefusesSlicesOutOfTheFilesOrder) {
  TempDir dir;
  LaidOut data = lay_out();
  std::swap(data.slices[0].data, data.slices[1].data);
  try {
    write_laid_out_slice_file(dir.path() / "x.safetensors", data.slices,
                              {data.buffer.get(), data.size});
    ADD_FAILURE() << "slices out of the file's order were written";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("not where the file's layout puts it"), std::string::npos)
        << e.what();
  }
  EXPECT_FALSE(fs::exists(dir.path() / "x.safetensors"));
}

}  // namespace
}  // namespace maxctx::io

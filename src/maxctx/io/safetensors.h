// safetensors: the checkpoint format maxctx reads and writes (Hugging Face names, raw bytes).
//
// Layout: 8-byte little-endian header length N, N bytes of JSON
//   {"name": {"dtype": "F32", "shape": [..], "data_offsets": [begin, end]}, ...,
//    "__metadata__": {str: str}}
// then the data section; offsets are relative to its start. A reader maps the file read-only and
// validates the whole header before handing out a single byte: every tensor's byte range lies in
// the data section and matches shape × dtype size, no two ranges overlap, and the ranges tile the
// data section exactly (no gaps, no trailing bytes — what the reference implementation demands,
// so a file accepted here is accepted everywhere). Every violation is a one-line maxctx::Error
// naming the file, what is wrong and what is allowed. This is not a tensor library: it hands out
// bytes, f32 and i32 copies; the model decides what to do with them.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "maxctx/core/tensor.h"

namespace maxctx::io {

// Element types as the safetensors header spells them ("F32", "BF16", ...).
enum class StDType : uint8_t {
  kBool,
  kU8,
  kI8,
  kU16,
  kI16,
  kF16,
  kBF16,
  kU32,
  kI32,
  kF32,
  kU64,
  kI64,
  kF64
};

size_t element_size(StDType dtype);
std::string_view st_dtype_name(StDType dtype);
// std::nullopt for a name this reader does not know (e.g. the float8 types).
std::optional<StDType> parse_st_dtype(std::string_view name);
// The file dtype of a tensor dtype (F32, BF16, I8).
StDType st_dtype_of(DType dtype);
// "BOOL, U8, I8, ..." for error messages.
std::string known_st_dtypes();

// IEEE binary16 <-> binary32. f16_to_f32 is exact (subnormals, ±inf, NaN payload kept);
// f32_to_f16 rounds to nearest even, overflows to ±inf, keeps NaN a (quiet) NaN.
float f16_to_f32(uint16_t bits);
uint16_t f32_to_f16(float value);

std::string shape_string(std::span<const int64_t> shape);  // "[2, 3]", "[]" for a scalar

struct TensorInfo {
  std::string name;
  StDType dtype = StDType::kF32;
  std::vector<int64_t> shape;  // any rank; [] is a scalar (one element)
  uint64_t begin = 0;          // byte range [begin, end) in the data section
  uint64_t end = 0;

  int64_t numel() const;
  uint64_t bytes() const { return end - begin; }
};

// One .safetensors file, memory-mapped read-only for the object's lifetime. The mapping is
// private and read-only; a file truncated by someone else while mapped ends the process (SIGBUS),
// as with any mmap reader. Thread-safe for concurrent reads.
class SafetensorsFile {
 public:
  // Maps `path` and validates the header; throws maxctx::Error naming the file on any problem.
  explicit SafetensorsFile(std::filesystem::path path);
  ~SafetensorsFile();
  SafetensorsFile(SafetensorsFile&& other) noexcept;
  SafetensorsFile& operator=(SafetensorsFile&& other) noexcept;
  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;

  const std::filesystem::path& path() const { return path_; }
  const std::vector<TensorInfo>& tensors() const { return tensors_; }  // sorted by name
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  // Where the data section starts in the file: a tensor's bytes are at data_offset() + begin.
  uint64_t data_offset() const { return static_cast<uint64_t>(data_ - map_); }

  const TensorInfo* find(std::string_view name) const;  // nullptr when absent
  bool contains(std::string_view name) const { return find(name) != nullptr; }
  // Throws when absent, naming the file, the tensor and a few names the file does hold.
  const TensorInfo& info(std::string_view name) const;
  // info() plus a dtype and shape check; throws naming both the expected and the found.
  const TensorInfo& expect(std::string_view name, StDType dtype,
                           const std::vector<int64_t>& shape) const;

  // The mapped bytes of a tensor. Not necessarily aligned for its element type: copy with memcpy
  // or use the read_* helpers.
  std::span<const std::byte> bytes(std::string_view name) const;
  std::span<const std::byte> bytes(const TensorInfo& info) const;

  // Copies a F32, BF16 or F16 tensor into f32, converting; the tensor's shape must equal
  // `expected_shape` (and out.size() its element count).
  void read_f32(std::string_view name, const std::vector<int64_t>& expected_shape,
                std::span<float> out) const;
  std::vector<float> read_f32(std::string_view name,
                              const std::vector<int64_t>& expected_shape) const;
  // Same into an f32 view; the view's shape is the expected shape.
  void read_f32_into(std::string_view name, const TensorView& out) const;
  // Into a host view of f32 or bf16, the view's shape being the expected shape: bytes copied as
  // they are when the file holds the view's dtype (a BF16 checkpoint into bf16 weights: no f32
  // copy), else converted (to bf16 rounding to nearest even).
  void read_into(std::string_view name, const TensorView& out) const;
  // Copies an I32 tensor, or any other integer one (I64, U64, U32, I16, U16, I8, U8) whose
  // values all fit in int32; an element that does not is an error naming it.
  std::vector<int32_t> read_i32(std::string_view name,
                                const std::vector<int64_t>& expected_shape) const;

 private:
  void unmap();

  std::filesystem::path path_;
  const std::byte* map_ = nullptr;  // the whole file
  size_t map_size_ = 0;
  const std::byte* data_ = nullptr;  // the data section, inside map_
  size_t data_size_ = 0;
  std::vector<TensorInfo> tensors_;
  std::map<std::string, std::string> metadata_;
};

// A tensor to write: its bytes are borrowed and must outlive the write call.
struct TensorToWrite {
  std::string name;
  StDType dtype = StDType::kF32;
  std::vector<int64_t> shape;
  std::span<const std::byte> data;  // exactly numel × element_size(dtype) bytes
};

// Wraps typed values as a TensorToWrite, checking that the element size matches the dtype.
template <typename T>
TensorToWrite tensor_to_write(std::string name, StDType dtype, std::vector<int64_t> shape,
                              std::span<const T> values) {
  MAXCTX_CHECK_EQ(sizeof(T), element_size(dtype), "element type does not match dtype {}",
                  st_dtype_name(dtype));
  return TensorToWrite{std::move(name), dtype, std::move(shape), std::as_bytes(values)};
}

// Writes `tensors` (data in name order) and `metadata` to `path`: the header is padded with
// spaces so the data section starts 8-byte aligned, the file is written to `<path>.tmp`, synced
// and renamed over `path`, so a reader sees the old file or the whole new one, never half of one.
// Throws maxctx::Error on a duplicate or reserved name, a size that does not match the shape, or
// an I/O failure (the .tmp file is removed).
void write_safetensors(const std::filesystem::path& path, std::span<const TensorToWrite> tensors,
                       const std::map<std::string, std::string>& metadata = {});

// A tensor's entry in the header, without its bytes.
struct TensorHeader {
  std::string name;
  StDType dtype = StDType::kF32;
  std::vector<int64_t> shape;
};
// The same file, written tensor by tensor: `bytes_of(i)` gives tensors[i]'s bytes just before
// they are written (the span need only live until the next call), so a writer holds one tensor
// at a time (`maxctx export` of a model larger than memory). Same checks, same atomic rename.
void write_safetensors_streamed(
    const std::filesystem::path& path, std::span<const TensorHeader> tensors,
    const std::map<std::string, std::string>& metadata,
    const std::function<std::span<const std::byte>(size_t index)>& bytes_of);

// Where a writer puts what: the header (the 8-byte length and the JSON, padded with spaces so
// the data section begins on a multiple of `data_alignment` bytes) and each tensor's bytes, in
// the order of their names (as the reference writer does). Checks the names and shapes (throws
// maxctx::Error naming `path`).
struct SafetensorsLayout {
  std::string header;
  std::vector<size_t> order;    // indices into the tensors, in the order their bytes follow
  std::vector<uint64_t> sizes;  // bytes of each tensor, by index
  uint64_t data_bytes = 0;
};
SafetensorsLayout safetensors_layout(const std::filesystem::path& path,
                                     std::span<const TensorHeader> tensors,
                                     const std::map<std::string, std::string>& metadata,
                                     uint64_t data_alignment);

// The same file from bytes already laid out as the file holds them: `data` is every tensor's
// bytes in the order of their names, back to back (a checkpoint's staging buffer). The data
// section then begins on a 4 KiB boundary and goes to the disk straight from `data` (O_DIRECT):
// no kernel copy into the page cache and no dirty pages for the cores of the step loop to write
// back while an asynchronous save runs beside it. `data` must begin on a 4 KiB boundary and be
// readable up to the next one past its end (those bytes are written and then cut off). Where the
// file system refuses direct I/O (tmpfs), the same bytes go through the page cache.
// `before_chunk(written, total)` runs before each chunk (at most 64 MiB, at least two chunks for
// more than a block). Synced, renamed into place like the others.
inline constexpr uint64_t kDirectIoAlignment = 4096;
void write_safetensors_laid_out(
    const std::filesystem::path& path, std::span<const TensorHeader> tensors,
    const std::map<std::string, std::string>& metadata, std::span<const std::byte> data,
    const std::function<void(uint64_t written, uint64_t total)>& before_chunk = {});

// A checkpoint as Hugging Face ships it: one model.safetensors, or shards listed by
// model.safetensors.index.json ({"metadata": {...}, "weight_map": {tensor: shard file}}). Shards
// are opened (and validated) the first time one of their tensors is asked for; a tensor the index
// lists but its shard lacks is an error at that point (verify() checks all of them up front).
// Shard names must be plain file names next to the index. Not thread-safe (lazy opening).
class SafetensorsCheckpoint {
 public:
  static constexpr std::string_view kIndexName = "model.safetensors.index.json";
  static constexpr std::string_view kSingleName = "model.safetensors";

  // `path`: a directory (index if present, else model.safetensors), an index file, or one
  // .safetensors file.
  explicit SafetensorsCheckpoint(const std::filesystem::path& path);
  ~SafetensorsCheckpoint();
  SafetensorsCheckpoint(SafetensorsCheckpoint&&) noexcept;
  SafetensorsCheckpoint& operator=(SafetensorsCheckpoint&&) noexcept;

  std::vector<std::string> tensor_names() const;  // sorted
  bool contains(std::string_view name) const;
  size_t num_shards() const;       // distinct shard files the checkpoint names
  size_t num_open_shards() const;  // how many have been opened so far
  // The shard holding `name`, opened on first use; throws when the name is not listed or the
  // shard does not hold it.
  const SafetensorsFile& file_for(std::string_view name) const;
  // Opens every shard and checks every listed tensor is present.
  void verify() const;

  const TensorInfo& info(std::string_view name) const { return file_for(name).info(name); }
  std::span<const std::byte> bytes(std::string_view name) const {
    return file_for(name).bytes(name);
  }
  std::vector<float> read_f32(std::string_view name,
                              const std::vector<int64_t>& expected_shape) const {
    return file_for(name).read_f32(name, expected_shape);
  }
  void read_f32_into(std::string_view name, const TensorView& out) const {
    file_for(name).read_f32_into(name, out);
  }
  void read_into(std::string_view name, const TensorView& out) const {
    file_for(name).read_into(name, out);
  }

 private:
  std::filesystem::path origin_;  // what the user passed, for messages
  std::filesystem::path dir_;     // shard names are relative to this
  std::map<std::string, std::string, std::less<>> weight_map_;  // tensor -> shard file name
  mutable std::map<std::string, std::unique_ptr<SafetensorsFile>> shards_;  // opened so far
};

}  // namespace maxctx::io

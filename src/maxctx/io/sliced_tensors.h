// Tensors stored as rectangular slices spread over files: what a sharded checkpoint is made of.
//
// A tensor of global shape [R, C] (a vector [R] is read as [R, 1]) is stored as slices, each a
// rectangle [row, row + rows) x [col, col + cols) whose elements lie row-major at one byte range
// of one file. A SliceIndex maps every tensor name to its dtype, global shape and slices; it is
// what index.json of a maxctx checkpoint holds, and what the tensors of plain safetensors files
// (a Hugging Face directory, single file or multi-file, or an older maxctx checkpoint) look like
// when each is one slice covering the whole tensor.
//
// The reader assembles any rectangle of a tensor from the slices it overlaps and reads only those
// bytes (pread: nothing is mapped, so the page cache does not count as the reader's memory),
// converting F32/BF16/F16 to the destination's f32 or bf16 row segment by row segment. Every
// element of the rectangle must be covered exactly once, or the read is an error naming the
// tensor. This is not a tensor library: rectangles in, bytes out; the sharding is the caller's.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "maxctx/core/tensor.h"
#include "maxctx/io/safetensors.h"

namespace maxctx::io {

// A rectangle of a tensor in its global (unsharded) coordinates.
struct Rect {
  int64_t row = 0, col = 0;
  int64_t rows = 0, cols = 0;
  int64_t numel() const { return rows * cols; }
};

struct SliceLocation {
  std::filesystem::path file;  // the file holding it (absolute or as given)
  Rect rect;
  uint64_t byte_begin = 0;  // element (rect.row, rect.col) in the file; rows x cols follow
};

struct SlicedTensor {
  StDType dtype = StDType::kF32;
  std::vector<int64_t> shape;  // [R] or [R, C]
  std::vector<SliceLocation> slices;
  int64_t rows() const { return shape.empty() ? 1 : shape[0]; }
  int64_t cols() const { return shape.size() < 2 ? 1 : shape[1]; }
};

using SliceIndex = std::map<std::string, SlicedTensor, std::less<>>;

// Every tensor of a safetensors checkpoint (a directory with model.safetensors or
// model.safetensors.index.json, an index file or one file; see SafetensorsCheckpoint) as one
// whole-tensor slice each. Tensors of rank above 2 are refused, naming them.
SliceIndex whole_tensor_index(const SafetensorsCheckpoint& checkpoint);
// The same for one file's tensors, added to `index`.
void add_whole_tensors(const SafetensorsFile& file, SliceIndex& index);

// The JSON form (index.json's "tensors"): file names relative to `dir`, which must be plain
// names (no directories, no ".."). parse_slice_index checks every entry (known dtype, shapes,
// slices inside the tensor, byte ranges of the slices' size) and throws maxctx::Error naming
// `origin` and the tensor; whether the slices cover each tensor is check_slices_cover's.
std::string slice_index_json(const SliceIndex& index, int indent = -1);
SliceIndex parse_slice_index(std::string_view json_text, const std::filesystem::path& dir,
                             const std::string& origin);
// Adds `part`'s slices to `index` (the ranks' parts of one checkpoint); the same tensor in both
// must agree on dtype and shape.
void merge_slice_index(SliceIndex& index, SliceIndex part);
// Checks that every tensor's slices cover it exactly (areas add up, none outside): what a
// complete checkpoint's index must satisfy.
void check_slices_cover(const SliceIndex& index, const std::string& origin);

// index.json: {"format": kSliceIndexFormat, "tensors": {...}} beside the slice files.
inline constexpr std::string_view kSliceIndexName = "index.json";
inline constexpr std::string_view kSliceIndexFormat = "maxctx-slices-v1";
// Writes `index` as `path` (synced; the tensors' slices must cover them).
void write_slice_index_file(const std::filesystem::path& path, const SliceIndex& index);
// Reads and checks an index.json (format, entries, coverage); errors name the file.
SliceIndex read_slice_index_file(const std::filesystem::path& path);
// The tensors a directory holds: its index.json (a maxctx checkpoint) when there is one, else
// its safetensors checkpoint (model.safetensors or model.safetensors.index.json) as whole
// tensors. `path` may also name a .safetensors file or an index file.
SliceIndex open_tensor_index(const std::filesystem::path& path);

// One slice to write: `data` holds rect.rows x rect.cols elements of `dtype`, row-major.
struct SliceToWrite {
  std::string tensor;
  StDType dtype = StDType::kF32;
  std::vector<int64_t> tensor_shape;  // the global shape
  Rect rect;
  std::span<const std::byte> data;
};

// Writes `slices` as one safetensors file `path` (each slice a tensor "<tensor>@<row>,<col>" of
// shape [rows, cols], or [rows] for a vector's), synced; returns their index entries, the file
// named by its file name alone. Throws maxctx::Error on an I/O failure.
// `before_slice(i)` (optional) runs before slice i's bytes are written (fault injection).
SliceIndex write_slice_file(const std::filesystem::path& path, std::span<const SliceToWrite> slices,
                            const std::function<void(size_t)>& before_slice = {});

// The name a slice's bytes have in its file: "<tensor>@<row>,<col>".
std::string slice_key(const SliceToWrite& slice);

// The same file from bytes already laid out as the file holds them (a checkpoint's staging
// buffer): `data` holds the slices' bytes back to back in the order of their keys, and each
// slice's span points into it; written by direct I/O (write_safetensors_laid_out, whose alignment
// rules `data` follows).
SliceIndex write_laid_out_slice_file(
    const std::filesystem::path& path, std::span<const SliceToWrite> slices,
    std::span<const std::byte> data,
    const std::function<void(uint64_t written, uint64_t total)>& before_chunk = {});

// Whether a SliceReader converts tensors of this dtype into f32 or bf16 (F32, BF16, F16).
inline bool is_float_dtype(StDType dtype) {
  return dtype == StDType::kF32 || dtype == StDType::kBF16 || dtype == StDType::kF16;
}

// The most a read that converts dtype holds at once beside its destination (a chunk of the
// file's bytes).
inline constexpr int64_t kSliceConversionBytes = int64_t{1} << 20;

// Reads rectangles of indexed tensors (see the file comment). Not thread-safe: files are opened
// on first use and kept open; each is checked to be long enough for every slice it holds.
class SliceReader {
 public:
  SliceReader(SliceIndex index, std::string origin);
  ~SliceReader();
  SliceReader(SliceReader&&) noexcept;
  SliceReader& operator=(SliceReader&&) noexcept;

  const SliceIndex& index() const { return index_; }
  bool contains(std::string_view name) const { return index_.find(name) != index_.end(); }
  // Throws when absent, naming the origin.
  const SlicedTensor& tensor(std::string_view name) const;

  // out (host memory, f32 or bf16, rect.numel() elements) = the rectangle of tensor `name`.
  void read(std::string_view name, const Rect& rect, const TensorView& out) const;
  // Bytes read from files so far (what a rank touched).
  uint64_t bytes_read() const { return bytes_read_; }

 private:
  int file_descriptor(const std::filesystem::path& file) const;

  SliceIndex index_;
  std::string origin_;
  mutable std::map<std::filesystem::path, int> open_files_;
  mutable std::map<std::filesystem::path, uint64_t> needed_sizes_;  // the largest byte end
  mutable uint64_t bytes_read_ = 0;
};

}  // namespace maxctx::io

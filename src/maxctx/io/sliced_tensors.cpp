// Slices of tensors across files: index JSON, the slice-file writer, and the pread-based reader.
//
// The reader's unit of work is a row segment: the part of one row of the requested rectangle
// that one stored slice holds. Where the stored slice, the request and their overlap are all
// the full width, consecutive rows are contiguous on both sides and go in one read.
#include "maxctx/io/sliced_tensors.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <nlohmann/json.hpp>

#include "maxctx/core/check.h"
#include "maxctx/core/dtype.h"
#include "maxctx/core/json_checks.h"
#include "maxctx/io/durable_file.h"

namespace maxctx::io {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

// Large enough for any real tensor dimension, small enough that rows x cols x 8 bytes fits in
// int64 without overflow checks at every product.
constexpr int64_t kMaxDim = int64_t{1} << 40;
constexpr int64_t kMaxNumel = int64_t{1} << 52;

std::string errno_text() { return std::strerror(errno); }

std::vector<int64_t> dims_of(const Rect& r, size_t rank) {
  return rank == 1 ? std::vector<int64_t>{r.row} : std::vector<int64_t>{r.row, r.col};
}
std::vector<int64_t> extent_of(const Rect& r, size_t rank) {
  return rank == 1 ? std::vector<int64_t>{r.rows} : std::vector<int64_t>{r.rows, r.cols};
}

Rect intersect(const Rect& a, const Rect& b) {
  const int64_t row = std::max(a.row, b.row);
  const int64_t col = std::max(a.col, b.col);
  const int64_t row_end = std::min(a.row + a.rows, b.row + b.rows);
  const int64_t col_end = std::min(a.col + a.cols, b.col + b.cols);
  if (row_end <= row || col_end <= col) return {row, col, 0, 0};
  return {row, col, row_end - row, col_end - col};
}

bool plain_file_name(const std::string& name) {
  return !name.empty() && name != "." && name != ".." && name.find('/') == std::string::npos &&
         name.find('\0') == std::string::npos;
}

// dst (dst_dtype) = n elements of src (src_dtype): F32, BF16 and F16 in; f32 or bf16 out.
void convert(StDType src_dtype, const std::byte* src, DType dst_dtype, std::byte* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    float value = 0.0f;
    switch (src_dtype) {
      case StDType::kF32:
        std::memcpy(&value, src + 4 * i, 4);
        break;
      case StDType::kBF16: {
        uint16_t bits;
        std::memcpy(&bits, src + 2 * i, 2);
        value = bf16_to_float(bf16{bits});
        break;
      }
      case StDType::kF16: {
        uint16_t bits;
        std::memcpy(&bits, src + 2 * i, 2);
        value = f16_to_f32(bits);
        break;
      }
      default:
        MAXCTX_CHECK(false, "a float dtype, got {}", st_dtype_name(src_dtype));
    }
    if (dst_dtype == DType::kF32) {
      std::memcpy(dst + 4 * i, &value, 4);
    } else {
      const bf16 rounded = float_to_bf16(value);
      std::memcpy(dst + 2 * i, &rounded.bits, 2);
    }
  }
}

bool convertible(StDType from, DType to) {
  return is_float_dtype(from) && (to == DType::kF32 || to == DType::kBF16);
}

}  // namespace

namespace {

// One tensor of a plain safetensors file as a single slice covering it.
SlicedTensor whole_tensor(const SafetensorsFile& file, const TensorInfo& info) {
  if (info.shape.size() > 2) {
    fail("'{}': tensor '{}' has shape {}; weights are vectors or matrices", file.path().string(),
         info.name, shape_string(info.shape));
  }
  SlicedTensor t;
  t.dtype = info.dtype;
  t.shape = info.shape.empty() ? std::vector<int64_t>{1} : info.shape;
  t.slices.push_back({file.path(), {0, 0, t.rows(), t.cols()}, file.data_offset() + info.begin});
  return t;
}

}  // namespace

void add_whole_tensors(const SafetensorsFile& file, SliceIndex& index) {
  for (const TensorInfo& info : file.tensors()) index[info.name] = whole_tensor(file, info);
}

SliceIndex whole_tensor_index(const SafetensorsCheckpoint& checkpoint) {
  SliceIndex index;
  for (const std::string& name : checkpoint.tensor_names()) {
    const SafetensorsFile& file = checkpoint.file_for(name);
    index[name] = whole_tensor(file, file.info(name));
  }
  return index;
}

std::string slice_index_json(const SliceIndex& index, int indent) {
  json tensors = json::object();
  for (const auto& [name, t] : index) {
    json slices = json::array();
    const uint64_t size = element_size(t.dtype);
    for (const SliceLocation& s : t.slices) {
      const uint64_t end = s.byte_begin + static_cast<uint64_t>(s.rect.numel()) * size;
      slices.push_back({{"file", s.file.filename().string()},
                        {"offset", dims_of(s.rect, t.shape.size())},
                        {"shape", extent_of(s.rect, t.shape.size())},
                        {"byte_range", {s.byte_begin, end}}});
    }
    tensors[name] = {{"dtype", st_dtype_name(t.dtype)}, {"shape", t.shape}, {"slices", slices}};
  }
  return tensors.dump(indent);
}

namespace {

SliceIndex parse_tensors(const json& root, const fs::path& dir, const std::string& origin) {
  if (!root.is_object()) fail("'{}': the tensor index is not a JSON object", origin);
  SliceIndex index;
  for (const auto& item : root.items()) {
    // Named, not a structured binding: a lambda may not capture one before C++20's P1091
    // (clang 14, which builds the fuzzers, refuses it).
    const std::string& name = item.key();
    const json& entry = item.value();
    const auto bad = [&](const std::string& what) {
      fail("'{}': tensor '{}' in the index: {}", origin, name, what);
    };
    if (!entry.is_object() || !entry.contains("dtype") || !entry.contains("shape") ||
        !entry.contains("slices") || !entry["dtype"].is_string() || !entry["slices"].is_array()) {
      bad("expected {\"dtype\", \"shape\", \"slices\": [...]}");
    }
    SlicedTensor t;
    const std::optional<StDType> dtype = parse_st_dtype(entry["dtype"].get<std::string>());
    if (!dtype) bad(fmt::format("unknown dtype {}", entry["dtype"].dump()));
    t.dtype = *dtype;
    const auto dims = [&](const json& value, const char* what, int64_t lowest) {
      if (!value.is_array() || value.empty() || value.size() > 2) {
        bad(fmt::format("{} must be a list of 1 or 2 integers", what));
      }
      std::vector<int64_t> out;
      for (const json& d : value) {
        if (!d.is_number_integer() || d.get<int64_t>() < lowest || d.get<int64_t>() > kMaxDim) {
          bad(fmt::format("{} {} is not a list of integers in [{}, 2^40]", what, value.dump(),
                          lowest));
        }
        out.push_back(d.get<int64_t>());
      }
      return out;
    };
    t.shape = dims(entry["shape"], "shape", 1);
    if (t.rows() * t.cols() > kMaxNumel) bad("the shape is too large");
    for (const json& s : entry["slices"]) {
      if (!s.is_object() || !s.contains("file") || !s["file"].is_string() ||
          !s.contains("byte_range") || !s["byte_range"].is_array() || s["byte_range"].size() != 2 ||
          !s["byte_range"][0].is_number_unsigned() || !s["byte_range"][1].is_number_unsigned() ||
          !s.contains("offset") || !s.contains("shape")) {
        bad("a slice must be {\"file\", \"offset\", \"shape\", \"byte_range\": [begin, end]}");
      }
      const std::string file = s["file"].get<std::string>();
      if (!plain_file_name(file)) bad(fmt::format("file '{}' is not a plain file name", file));
      const std::vector<int64_t> offset = dims(s["offset"], "offset", 0);
      const std::vector<int64_t> extent = dims(s["shape"], "slice shape", 1);
      if (offset.size() != t.shape.size() || extent.size() != t.shape.size()) {
        bad("a slice's offset and shape must have the tensor's rank");
      }
      const Rect rect = t.shape.size() == 1 ? Rect{offset[0], 0, extent[0], 1}
                                            : Rect{offset[0], offset[1], extent[0], extent[1]};
      if (rect.row + rect.rows > t.rows() || rect.col + rect.cols > t.cols()) {
        bad(fmt::format("slice at {} of shape {} lies outside shape {}", s["offset"].dump(),
                        s["shape"].dump(), entry["shape"].dump()));
      }
      const uint64_t begin = s["byte_range"][0].get<uint64_t>();
      const uint64_t end = s["byte_range"][1].get<uint64_t>();
      const uint64_t bytes = static_cast<uint64_t>(rect.numel()) * element_size(t.dtype);
      if (end < begin || end - begin != bytes) {
        bad(fmt::format("byte_range [{}, {}] is not the slice's {} bytes", begin, end, bytes));
      }
      t.slices.push_back({dir / file, rect, begin});
    }
    index[name] = std::move(t);
  }
  return index;
}

json parse_checked(std::string_view text, const std::string& origin) {
  const JsonCheck check = check_json(text);
  if (check.error) fail("'{}': the tensor index is {}", origin, *check.error);
  try {
    return json::parse(text);
  } catch (const json::exception& e) {
    fail("'{}': the tensor index is not valid JSON ({})", origin, e.what());
  }
}

}  // namespace

SliceIndex parse_slice_index(std::string_view json_text, const fs::path& dir,
                             const std::string& origin) {
  return parse_tensors(parse_checked(json_text, origin), dir, origin);
}

void merge_slice_index(SliceIndex& index, SliceIndex part) {
  for (auto& [name, t] : part) {
    const auto it = index.find(name);
    if (it == index.end()) {
      index.emplace(name, std::move(t));
      continue;
    }
    MAXCTX_CHECK(it->second.dtype == t.dtype && it->second.shape == t.shape,
                 "tensor '{}' saved with two dtypes or shapes by two ranks", name);
    for (SliceLocation& s : t.slices) it->second.slices.push_back(std::move(s));
  }
}

void check_slices_cover(const SliceIndex& index, const std::string& origin) {
  for (const auto& [name, t] : index) {
    int64_t area = 0;
    for (const SliceLocation& s : t.slices) area += s.rect.numel();
    if (area != t.rows() * t.cols()) {
      fail(
          "'{}': the slices of tensor '{}' cover {} of its {} elements; the checkpoint is "
          "incomplete or damaged",
          origin, name, area, t.rows() * t.cols());
    }
  }
}

void write_slice_index_file(const fs::path& path, const SliceIndex& index) {
  check_slices_cover(index, path.string());
  const std::string text = fmt::format("{{\"format\": \"{}\", \"tensors\": {}}}\n",
                                       kSliceIndexFormat, slice_index_json(index));
  write_synced_text(path, text);
}

SliceIndex read_slice_index_file(const fs::path& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) fail("cannot open tensor index '{}': {}", path.string(), errno_text());
  struct stat st {};
  // An index names a few slices per tensor and rank: far below this bound.
  constexpr int64_t kMaxIndexBytes = int64_t{1} << 30;
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_size > kMaxIndexBytes) {
    ::close(fd);
    fail("tensor index '{}' is not a regular file of at most 1 GiB", path.string());
  }
  std::string text(static_cast<size_t>(st.st_size), '\0');
  size_t done = 0;
  while (done < text.size()) {
    const ssize_t got = ::read(fd, text.data() + done, text.size() - done);
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) break;
    done += static_cast<size_t>(got);
  }
  ::close(fd);
  if (done != text.size()) fail("cannot read tensor index '{}'", path.string());
  const json root = parse_checked(text, path.string());
  if (!root.is_object() || !root.contains("format") || !root.contains("tensors") ||
      root["format"] != kSliceIndexFormat) {
    fail("tensor index '{}' is not a {} index ({{\"format\", \"tensors\"}})", path.string(),
         kSliceIndexFormat);
  }
  SliceIndex index = parse_tensors(root["tensors"], path.parent_path(), path.string());
  check_slices_cover(index, path.string());
  return index;
}

SliceIndex open_tensor_index(const fs::path& path) {
  std::error_code ec;
  if (fs::is_directory(path, ec) && fs::exists(path / kSliceIndexName, ec)) {
    return read_slice_index_file(path / kSliceIndexName);
  }
  return whole_tensor_index(SafetensorsCheckpoint(path));
}

namespace {

std::vector<TensorHeader> slice_headers(std::span<const SliceToWrite> slices) {
  std::vector<TensorHeader> headers;
  for (const SliceToWrite& s : slices) {
    std::vector<int64_t> shape = s.tensor_shape.size() == 1
                                     ? std::vector<int64_t>{s.rect.rows}
                                     : std::vector<int64_t>{s.rect.rows, s.rect.cols};
    headers.push_back({slice_key(s), s.dtype, std::move(shape)});
  }
  return headers;
}

// The byte ranges are the written file's own header's: read back, never recomputed.
SliceIndex index_of_written(const fs::path& path, std::span<const SliceToWrite> slices) {
  const SafetensorsFile file(path);
  SliceIndex index;
  for (const SliceToWrite& s : slices) {
    const TensorInfo& info = file.info(slice_key(s));
    SlicedTensor& t = index[s.tensor];
    t.dtype = s.dtype;
    t.shape = s.tensor_shape;
    t.slices.push_back({path.filename(), s.rect, file.data_offset() + info.begin});
  }
  return index;
}

}  // namespace

std::string slice_key(const SliceToWrite& slice) {
  return fmt::format("{}@{},{}", slice.tensor, slice.rect.row, slice.rect.col);
}

SliceIndex write_slice_file(const fs::path& path, std::span<const SliceToWrite> slices,
                            const std::function<void(size_t)>& before_slice) {
  write_safetensors_streamed(path, slice_headers(slices), {{"format", "maxctx-slices"}},
                             [&](size_t i) {
                               if (before_slice) before_slice(i);
                               return slices[i].data;
                             });
  return index_of_written(path, slices);
}

SliceIndex write_laid_out_slice_file(
    const fs::path& path, std::span<const SliceToWrite> slices, std::span<const std::byte> data,
    const std::function<void(uint64_t written, uint64_t total)>& before_chunk) {
  const std::vector<TensorHeader> headers = slice_headers(slices);
  const SafetensorsLayout layout =
      safetensors_layout(path, headers, {}, kDirectIoAlignment);  // for the order only
  uint64_t offset = 0;
  for (const size_t i : layout.order) {
    // Not the caller's layout: the file would say other bytes than the slices'.
    if (slices[i].data.data() != data.data() + offset || slices[i].data.size() != layout.sizes[i]) {
      fail(
          "cannot write '{}': slice '{}' is not where the file's layout puts it in the laid-out "
          "bytes",
          path.string(), headers[i].name);
    }
    offset += layout.sizes[i];
  }
  write_safetensors_laid_out(path, headers, {{"format", "maxctx-slices"}}, data, before_chunk);
  return index_of_written(path, slices);
}

SliceReader::SliceReader(SliceIndex index, std::string origin)
    : index_(std::move(index)), origin_(std::move(origin)) {
  for (const auto& [name, t] : index_) {
    for (const SliceLocation& s : t.slices) {
      uint64_t& needed = needed_sizes_[s.file];
      needed = std::max(
          needed, s.byte_begin + static_cast<uint64_t>(s.rect.numel()) * element_size(t.dtype));
    }
  }
}

SliceReader::~SliceReader() {
  for (const auto& [path, fd] : open_files_) ::close(fd);
}

SliceReader::SliceReader(SliceReader&& other) noexcept
    : index_(std::move(other.index_)),
      origin_(std::move(other.origin_)),
      open_files_(std::exchange(other.open_files_, {})),
      needed_sizes_(std::move(other.needed_sizes_)),
      bytes_read_(other.bytes_read_) {}

SliceReader& SliceReader::operator=(SliceReader&& other) noexcept {
  if (this != &other) {
    for (const auto& [path, fd] : open_files_) ::close(fd);
    index_ = std::move(other.index_);
    origin_ = std::move(other.origin_);
    open_files_ = std::exchange(other.open_files_, {});
    needed_sizes_ = std::move(other.needed_sizes_);
    bytes_read_ = other.bytes_read_;
  }
  return *this;
}

const SlicedTensor& SliceReader::tensor(std::string_view name) const {
  const auto it = index_.find(name);
  if (it == index_.end()) {
    fail(
        "'{}' has no tensor '{}' ({} tensors); the checkpoint is of a different model "
        "configuration",
        origin_, name, index_.size());
  }
  return it->second;
}

int SliceReader::file_descriptor(const fs::path& file) const {
  if (const auto it = open_files_.find(file); it != open_files_.end()) return it->second;
  const int fd = ::open(file.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0 && errno == ENOENT) fail("'{}' (of '{}') is missing", file.string(), origin_);
  if (fd < 0) fail("cannot open '{}' (of '{}'): {}", file.string(), origin_, errno_text());
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    fail("'{}' (of '{}') is not a regular file", file.string(), origin_);
  }
  const uint64_t needed = needed_sizes_[file];
  if (static_cast<uint64_t>(st.st_size) < needed) {
    ::close(fd);
    fail(
        "'{}' is {} bytes, but the index of '{}' places data up to byte {}; the file is "
        "truncated",
        file.string(), st.st_size, origin_, needed);
  }
  open_files_[file] = fd;
  return fd;
}

void SliceReader::read(std::string_view name, const Rect& rect, const TensorView& out) const {
  const SlicedTensor& t = tensor(name);
  MAXCTX_CHECK(rect.row >= 0 && rect.col >= 0 && rect.rows >= 0 && rect.cols >= 0 &&
                   rect.row + rect.rows <= t.rows() && rect.col + rect.cols <= t.cols(),
               "rectangle [{}, +{}) x [{}, +{}) of '{}' ({} x {})", rect.row, rect.rows, rect.col,
               rect.cols, name, t.rows(), t.cols());
  MAXCTX_CHECK_EQ(out.numel(), rect.numel(), "elements for the rectangle of '{}'", name);
  if (!convertible(t.dtype, out.dtype()) && st_dtype_of(out.dtype()) != t.dtype) {
    fail("'{}': tensor '{}' is {}, which cannot be read as {}", origin_, name,
         st_dtype_name(t.dtype), dtype_name(out.dtype()));
  }
  const bool same_dtype = st_dtype_of(out.dtype()) == t.dtype;
  const uint64_t src_size = element_size(t.dtype);
  const uint64_t dst_size = dtype_size(out.dtype());
  auto* const dst = static_cast<std::byte*>(out.raw());
  std::vector<std::byte> staging;
  const auto read_bytes = [&](int fd, const fs::path& file, std::byte* into, uint64_t bytes,
                              uint64_t offset) {
    while (bytes > 0) {
      const ssize_t got = ::pread(fd, into, bytes, static_cast<off_t>(offset));
      if (got < 0 && errno == EINTR) continue;
      if (got <= 0) {
        fail("cannot read {} bytes at {} of '{}' (tensor '{}'): {}", bytes, offset, file.string(),
             name, got < 0 ? errno_text() : std::string("the file ends early; it is truncated"));
      }
      into += got;
      bytes -= static_cast<uint64_t>(got);
      offset += static_cast<uint64_t>(got);
      bytes_read_ += static_cast<uint64_t>(got);
    }
  };
  // `count` elements at `offset` of the file into element `dst_index` of out.
  const auto read_elements = [&](const SliceLocation& s, uint64_t offset, int64_t dst_index,
                                 int64_t count) {
    const int fd = file_descriptor(s.file);
    std::byte* into = dst + static_cast<uint64_t>(dst_index) * dst_size;
    if (same_dtype) {
      read_bytes(fd, s.file, into, static_cast<uint64_t>(count) * src_size, offset);
      return;
    }
    const int64_t chunk = kSliceConversionBytes / static_cast<int64_t>(src_size);
    for (int64_t done = 0; done < count; done += chunk) {
      const int64_t n = std::min(chunk, count - done);
      staging.resize(static_cast<size_t>(n) * src_size);
      read_bytes(fd, s.file, staging.data(), staging.size(),
                 offset + static_cast<uint64_t>(done) * src_size);
      convert(t.dtype, staging.data(), out.dtype(), into + static_cast<uint64_t>(done) * dst_size,
              n);
    }
  };

  int64_t covered = 0;
  for (const SliceLocation& s : t.slices) {
    const Rect part = intersect(rect, s.rect);
    if (part.numel() == 0) continue;
    covered += part.numel();
    const auto src_offset = [&](int64_t row) {
      return s.byte_begin +
             static_cast<uint64_t>((row - s.rect.row) * s.rect.cols + (part.col - s.rect.col)) *
                 src_size;
    };
    const auto dst_index = [&](int64_t row) {
      return (row - rect.row) * rect.cols + (part.col - rect.col);
    };
    if (part.cols == s.rect.cols && part.cols == rect.cols) {
      read_elements(s, src_offset(part.row), dst_index(part.row), part.numel());
      continue;
    }
    for (int64_t row = part.row; row < part.row + part.rows; ++row) {
      read_elements(s, src_offset(row), dst_index(row), part.cols);
    }
  }
  if (covered != rect.numel()) {
    fail(
        "'{}': the stored slices of tensor '{}' cover {} of the {} elements of rows [{}, {}) x "
        "columns [{}, {}); the checkpoint is incomplete or damaged",
        origin_, name, covered, rect.numel(), rect.row, rect.row + rect.rows, rect.col,
        rect.col + rect.cols);
  }
}

}  // namespace maxctx::io

// safetensors reader, writer and sharded-checkpoint index (see safetensors.h for the format and
// the validation rules). All parsing happens once, in the constructor, on the mapped header; the
// accessors after that only index into already-validated ranges.
#include "maxctx/io/safetensors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstring>
#include <functional>
#include <limits>
#include <nlohmann/json.hpp>
#include <set>
#include <utility>

#include "maxctx/core/check.h"
#include "maxctx/core/dtype.h"
#include "maxctx/core/input_file.h"
#include "maxctx/core/json_checks.h"
#include "maxctx/core/progress.h"
#include "maxctx/io/durable_file.h"

namespace maxctx::io {

static_assert(std::endian::native == std::endian::little,
              "safetensors is little-endian; this reader copies bytes as they are");

namespace {

using nlohmann::json;

// The reference implementation refuses headers above 100 MB; a length beyond that is a corrupt
// or foreign file, not a checkpoint with ten million tensors.
constexpr uint64_t kMaxHeaderBytes = 100'000'000;
constexpr std::string_view kMetadataKey = "__metadata__";

struct DTypeEntry {
  StDType dtype;
  std::string_view name;
  size_t size;
};
constexpr DTypeEntry kDTypes[] = {
    {StDType::kBool, "BOOL", 1}, {StDType::kU8, "U8", 1},   {StDType::kI8, "I8", 1},
    {StDType::kU16, "U16", 2},   {StDType::kI16, "I16", 2}, {StDType::kF16, "F16", 2},
    {StDType::kBF16, "BF16", 2}, {StDType::kU32, "U32", 4}, {StDType::kI32, "I32", 4},
    {StDType::kF32, "F32", 4},   {StDType::kU64, "U64", 8}, {StDType::kI64, "I64", 8},
    {StDType::kF64, "F64", 8},
};

const DTypeEntry& entry_of(StDType dtype) {
  for (const DTypeEntry& entry : kDTypes) {
    if (entry.dtype == dtype) return entry;
  }
  MAXCTX_CHECK(false, "StDType {} is not in the dtype table", static_cast<int>(dtype));
  return kDTypes[0];
}

template <typename... Args>
[[noreturn]] void bad_file(const std::filesystem::path& path, fmt::format_string<Args...> format,
                           Args&&... args) {
  fail("safetensors file '{}': {}", path.string(),
       fmt::format(format, std::forward<Args>(args)...));
}

// A JSON value short enough for a one-line message.
std::string brief(const json& value) {
  std::string text = value.dump();
  if (text.size() > 60) text = text.substr(0, 57) + "...";
  return text;
}

// Element count of `shape`, or nullopt when it does not fit comfortably in int64 (so that
// numel × 8 bytes cannot overflow either).
std::optional<int64_t> checked_numel(std::span<const int64_t> shape) {
  constexpr int64_t kLimit = int64_t{1} << 59;
  int64_t numel = 1;
  for (int64_t dim : shape) {
    if (dim < 0) return std::nullopt;
    if (dim != 0 && numel > kLimit / dim) return std::nullopt;
    numel *= dim;
  }
  return numel;
}

// Up to three names that share the longest prefix with `wanted`: what a typo most likely meant.
std::string closest_names(std::string_view wanted, const std::vector<std::string>& names) {
  if (names.empty()) return "it holds no tensors";
  std::vector<std::pair<size_t, const std::string*>> ranked;
  for (const std::string& name : names) {
    const size_t limit = std::min(name.size(), wanted.size());
    size_t common = 0;
    while (common < limit && name[common] == wanted[common]) ++common;
    ranked.emplace_back(common, &name);
  }
  std::stable_sort(ranked.begin(), ranked.end(),
                   [](const auto& a, const auto& b) { return a.first > b.first; });
  std::string out = fmt::format("it holds {} tensors, e.g.", names.size());
  for (size_t i = 0; i < std::min<size_t>(3, ranked.size()); ++i) {
    out += fmt::format("{} '{}'", i == 0 ? "" : ",", *ranked[i].second);
  }
  return out;
}

// Parses one tensor entry of the header into `info`; `data_size` bounds the offsets.
TensorInfo parse_entry(const std::filesystem::path& path, const std::string& name,
                       const json& entry, uint64_t data_size) {
  if (!entry.is_object()) {
    bad_file(path, "entry '{}' is a JSON {}, expected an object with dtype, shape and data_offsets",
             name, entry.type_name());
  }
  for (const char* field : {"dtype", "shape", "data_offsets"}) {
    if (!entry.contains(field)) {
      bad_file(path,
               "entry '{}' has no '{}' field; every entry needs dtype, shape and data_offsets",
               name, field);
    }
  }
  TensorInfo info;
  info.name = name;

  const json& dtype = entry["dtype"];
  if (!dtype.is_string()) {
    bad_file(path, "entry '{}': dtype is a JSON {} ({}), expected a string such as \"F32\"", name,
             dtype.type_name(), brief(dtype));
  }
  const std::optional<StDType> parsed = parse_st_dtype(dtype.get<std::string>());
  if (!parsed) {
    bad_file(path, "entry '{}' has unknown dtype '{}'; known dtypes: {}", name,
             dtype.get<std::string>(), known_st_dtypes());
  }
  info.dtype = *parsed;

  const json& shape = entry["shape"];
  const bool shape_ok = shape.is_array() && std::all_of(shape.begin(), shape.end(), [](auto& d) {
                          return d.is_number_unsigned() && d.template get<uint64_t>() <= uint64_t{1}
                                                                                             << 62;
                        });
  if (!shape_ok) {
    bad_file(path, "entry '{}': shape must be an array of non-negative integers, got {}", name,
             brief(shape));
  }
  for (const json& dim : shape) info.shape.push_back(dim.get<int64_t>());
  const std::optional<int64_t> numel = checked_numel(info.shape);
  if (!numel) {
    bad_file(path, "entry '{}': shape {} has more elements than any file can hold", name,
             shape_string(info.shape));
  }

  const json& offsets = entry["data_offsets"];
  const bool offsets_ok = offsets.is_array() && offsets.size() == 2 &&
                          offsets[0].is_number_unsigned() && offsets[1].is_number_unsigned() &&
                          offsets[0].get<uint64_t>() <= offsets[1].get<uint64_t>();
  if (!offsets_ok) {
    bad_file(path,
             "entry '{}': data_offsets must be [begin, end] with integers 0 <= begin <= end, "
             "got {}",
             name, brief(offsets));
  }
  info.begin = offsets[0].get<uint64_t>();
  info.end = offsets[1].get<uint64_t>();

  const uint64_t expected_bytes = static_cast<uint64_t>(*numel) * element_size(info.dtype);
  if (info.bytes() != expected_bytes) {
    bad_file(path, "entry '{}': {} {} needs {} bytes but data_offsets [{}, {}] span {} bytes", name,
             st_dtype_name(info.dtype), shape_string(info.shape), expected_bytes, info.begin,
             info.end, info.bytes());
  }
  if (info.end > data_size) {
    bad_file(path,
             "entry '{}': data_offsets [{}, {}] run past the end of the data section ({} "
             "bytes); the file is truncated or its header is wrong",
             name, info.begin, info.end, data_size);
  }
  return info;
}

// The byte ranges must tile [0, data_size) exactly: sorted by offset, each begins where the last
// ended. Zero-byte tensors sit anywhere on a boundary.
void check_tiling(const std::filesystem::path& path, std::vector<TensorInfo> by_offset,
                  uint64_t data_size) {
  std::sort(by_offset.begin(), by_offset.end(), [](const TensorInfo& a, const TensorInfo& b) {
    return std::tie(a.begin, a.end) < std::tie(b.begin, b.end);
  });
  uint64_t covered = 0;
  const TensorInfo* previous = nullptr;
  for (const TensorInfo& info : by_offset) {
    if (info.begin < covered) {
      bad_file(path,
               "tensors '{}' [{}, {}) and '{}' [{}, {}) overlap; byte ranges must be disjoint",
               previous->name, previous->begin, previous->end, info.name, info.begin, info.end);
    }
    if (info.begin > covered) {
      bad_file(path,
               "bytes [{}, {}) of the data section, before tensor '{}', belong to no tensor; "
               "tensors must tile the data section without gaps",
               covered, info.begin, info.name);
    }
    covered = info.end;
    if (info.bytes() > 0) previous = &info;
  }
  if (covered != data_size) {
    bad_file(path,
             "the data section is {} bytes but the tensors end at byte {}; trailing bytes "
             "are not allowed",
             data_size, covered);
  }
}

void check_shape(const std::filesystem::path& path, const TensorInfo& info,
                 const std::vector<int64_t>& expected_shape) {
  if (info.shape != expected_shape) {
    bad_file(path, "tensor '{}' has shape {}, expected {}", info.name, shape_string(info.shape),
             shape_string(expected_shape));
  }
}

template <typename T>
T load(const std::byte* p) {
  T value;
  std::memcpy(&value, p, sizeof(T));
  return value;
}

template <typename T>
void narrow_to_i32(const std::filesystem::path& path, const TensorInfo& info, const std::byte* in,
                   std::span<int32_t> out) {
  for (size_t i = 0; i < out.size(); ++i) {
    const T value = load<T>(in + i * sizeof(T));
    if (!std::in_range<int32_t>(value)) {
      bad_file(path, "tensor '{}' ({}) element {} is {}, outside int32", info.name,
               st_dtype_name(info.dtype), i, value);
    }
    out[i] = static_cast<int32_t>(value);
  }
}

std::string errno_text() { return std::strerror(errno); }

// write(2) until everything is out; false (errno set) on failure. In chunks of at most 64 MiB,
// each noted as progress: a large shard is written while the other ranks wait (core/progress.h).
bool write_all(int fd, const std::byte* data, size_t size) {
  constexpr size_t kChunk = size_t{64} << 20;
  while (size > 0) {
    const ssize_t written = ::write(fd, data, std::min(size, kChunk));
    note_progress();
    if (written < 0) {
      if (errno == EINTR) continue;
      return false;
    }
    data += written;
    size -= static_cast<size_t>(written);
  }
  return true;
}

}  // namespace

size_t element_size(StDType dtype) { return entry_of(dtype).size; }

std::string_view st_dtype_name(StDType dtype) { return entry_of(dtype).name; }

std::optional<StDType> parse_st_dtype(std::string_view name) {
  for (const DTypeEntry& entry : kDTypes) {
    if (entry.name == name) return entry.dtype;
  }
  return std::nullopt;
}

std::string known_st_dtypes() {
  std::string out;
  for (const DTypeEntry& entry : kDTypes) {
    if (!out.empty()) out += ", ";
    out += entry.name;
  }
  return out;
}

float f16_to_f32(uint16_t bits) {
  const uint32_t sign = static_cast<uint32_t>(bits & 0x8000u) << 16;
  const uint32_t exponent = (bits >> 10) & 0x1fu;
  uint32_t mantissa = bits & 0x3ffu;
  uint32_t out;
  if (exponent == 0x1f) {
    out = sign | 0x7f800000u | (mantissa << 13);  // inf, or NaN with its payload
  } else if (exponent != 0) {
    out = sign | ((exponent + 112) << 23) | (mantissa << 13);  // rebias 15 -> 127
  } else if (mantissa == 0) {
    out = sign;
  } else {
    // Subnormal: mantissa · 2^-24. Shift the leading one up to the implicit bit; every f16
    // subnormal is an f32 normal, so this is exact.
    int32_t unbiased = -14;
    while ((mantissa & 0x400u) == 0) {
      mantissa <<= 1;
      --unbiased;
    }
    out = sign | (static_cast<uint32_t>(unbiased + 127) << 23) | ((mantissa & 0x3ffu) << 13);
  }
  float value;
  std::memcpy(&value, &out, sizeof(value));
  return value;
}

uint16_t f32_to_f16(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof(bits));
  const uint16_t sign = static_cast<uint16_t>((bits >> 16) & 0x8000u);
  const uint32_t magnitude = bits & 0x7fffffffu;
  if (magnitude > 0x7f800000u) {
    return static_cast<uint16_t>(sign | 0x7e00u | ((magnitude >> 13) & 0x3ffu));  // quiet NaN
  }
  // 65520 = 0x477ff000 is halfway between 65504 (the largest f16, odd mantissa) and 2^16: ties
  // round to even, i.e. up to infinity.
  if (magnitude >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);
  if (magnitude >= 0x38800000u) {  // f16 normal range: rebias and round away 13 bits
    const uint32_t rounded = magnitude + 0xfffu + ((magnitude >> 13) & 1u);
    return static_cast<uint16_t>(sign | ((rounded - (112u << 23)) >> 13));
  }
  // f16 subnormal or zero: the result is round(value · 2^24), which may carry into the smallest
  // normal (0x0400) — the encoding makes that correct as is.
  const uint32_t exponent = magnitude >> 23;
  if (exponent < 102) return sign;  // below 2^-25: rounds to zero (2^-25 itself ties to even 0)
  const uint32_t significand = (magnitude & 0x7fffffu) | 0x800000u;
  const uint32_t shift = 126 - exponent;  // 14..24
  uint32_t quotient = significand >> shift;
  const uint32_t remainder = significand & ((1u << shift) - 1);
  const uint32_t half = 1u << (shift - 1);
  if (remainder > half || (remainder == half && (quotient & 1u))) ++quotient;
  return static_cast<uint16_t>(sign | quotient);
}

std::string shape_string(std::span<const int64_t> shape) {
  return fmt::format("[{}]", fmt::join(shape, ", "));
}

int64_t TensorInfo::numel() const {
  int64_t numel = 1;
  for (int64_t dim : shape) numel *= dim;
  return numel;
}

SafetensorsFile::SafetensorsFile(std::filesystem::path path) : path_(std::move(path)) {
  // O_NONBLOCK: opening a FIFO of the name returns at once (and is refused below as not a
  // regular file) instead of waiting for a writer forever; it changes nothing for a file.
  const int fd = ::open(path_.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) bad_file(path_, "cannot open: {}", errno_text());
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    bad_file(path_, "is not a regular file");
  }
  map_size_ = static_cast<size_t>(st.st_size);
  if (map_size_ > 0) {
    void* addr = ::mmap(nullptr, map_size_, PROT_READ, MAP_PRIVATE, fd, 0);
    if (addr == MAP_FAILED) {
      const std::string reason = errno_text();
      ::close(fd);
      bad_file(path_, "cannot memory-map {} bytes: {}", map_size_, reason);
    }
    map_ = static_cast<const std::byte*>(addr);
  }
  ::close(fd);  // the mapping keeps the file alive

  try {
    if (map_size_ < 8) {
      bad_file(path_,
               "is {} bytes, shorter than the 8-byte header length every safetensors file "
               "starts with",
               map_size_);
    }
    const uint64_t header_size = load<uint64_t>(map_);
    if (header_size > map_size_ - 8) {
      bad_file(path_,
               "header length {} runs past the end of the file ({} bytes, so at most {} "
               "header bytes); the file is truncated or not safetensors",
               header_size, map_size_, map_size_ - 8);
    }
    if (header_size > kMaxHeaderBytes) {
      bad_file(path_, "header length {} exceeds the format's limit of {} bytes", header_size,
               kMaxHeaderBytes);
    }
    data_ = map_ + 8 + header_size;
    data_size_ = map_size_ - 8 - header_size;

    // One linear SAX pass first (nesting bound, duplicate names: nlohmann keeps the last of a
    // duplicate silently), then the tree without a callback (a callback made the parse
    // quadratic in the number of entries).
    const char* header_begin = reinterpret_cast<const char*>(map_ + 8);
    const std::string_view header_text(header_begin, header_size);
    const JsonCheck check = check_json(header_text);
    if (check.error) bad_file(path_, "the {}-byte header is {}", header_size, *check.error);
    json header;
    try {
      header = json::parse(header_text);
    } catch (const json::exception& e) {
      bad_file(path_, "the {}-byte header is not valid JSON ({})", header_size, e.what());
    }
    if (!header.is_object()) {
      bad_file(path_, "the header is a JSON {}, expected an object mapping tensor names to entries",
               header.type_name());
    }
    if (check.duplicate_top_key) {
      bad_file(path_, "the header names '{}' twice; tensor names must be unique",
               *check.duplicate_top_key);
    }

    for (const auto& [name, value] : header.items()) {
      if (name == kMetadataKey) {
        if (!value.is_object()) {
          bad_file(path_, "__metadata__ is a JSON {}, expected an object of string values",
                   value.type_name());
        }
        for (const auto& [key, text] : value.items()) {
          if (!text.is_string()) {
            bad_file(path_,
                     "__metadata__ value '{}' is a JSON {} ({}); metadata values must be "
                     "strings",
                     key, text.type_name(), brief(text));
          }
          metadata_.emplace(key, text.get<std::string>());
        }
        continue;
      }
      tensors_.push_back(parse_entry(path_, name, value, data_size_));
    }
    check_tiling(path_, tensors_, data_size_);
    // nlohmann objects iterate in key order already; sort anyway so find() never depends on it.
    std::sort(tensors_.begin(), tensors_.end(),
              [](const TensorInfo& a, const TensorInfo& b) { return a.name < b.name; });
  } catch (...) {
    unmap();
    throw;
  }
}

SafetensorsFile::~SafetensorsFile() { unmap(); }

SafetensorsFile::SafetensorsFile(SafetensorsFile&& other) noexcept
    : path_(std::move(other.path_)),
      map_(std::exchange(other.map_, nullptr)),
      map_size_(std::exchange(other.map_size_, 0)),
      data_(std::exchange(other.data_, nullptr)),
      data_size_(std::exchange(other.data_size_, 0)),
      tensors_(std::move(other.tensors_)),
      metadata_(std::move(other.metadata_)) {}

SafetensorsFile& SafetensorsFile::operator=(SafetensorsFile&& other) noexcept {
  if (this != &other) {
    unmap();
    path_ = std::move(other.path_);
    map_ = std::exchange(other.map_, nullptr);
    map_size_ = std::exchange(other.map_size_, 0);
    data_ = std::exchange(other.data_, nullptr);
    data_size_ = std::exchange(other.data_size_, 0);
    tensors_ = std::move(other.tensors_);
    metadata_ = std::move(other.metadata_);
  }
  return *this;
}

void SafetensorsFile::unmap() {
  if (map_ != nullptr) {
    ::munmap(const_cast<std::byte*>(map_), map_size_);
    map_ = nullptr;
  }
}

const TensorInfo* SafetensorsFile::find(std::string_view name) const {
  const auto it = std::lower_bound(
      tensors_.begin(), tensors_.end(), name,
      [](const TensorInfo& info, std::string_view wanted) { return info.name < wanted; });
  return it != tensors_.end() && it->name == name ? &*it : nullptr;
}

const TensorInfo& SafetensorsFile::info(std::string_view name) const {
  if (const TensorInfo* found = find(name)) return *found;
  std::vector<std::string> names;
  for (const TensorInfo& info : tensors_) names.push_back(info.name);
  bad_file(path_, "has no tensor '{}'; {}", name, closest_names(name, names));
}

const TensorInfo& SafetensorsFile::expect(std::string_view name, StDType dtype,
                                          const std::vector<int64_t>& shape) const {
  const TensorInfo& found = info(name);
  if (found.dtype != dtype) {
    bad_file(path_, "tensor '{}' is {}, expected {}", name, st_dtype_name(found.dtype),
             st_dtype_name(dtype));
  }
  check_shape(path_, found, shape);
  return found;
}

std::span<const std::byte> SafetensorsFile::bytes(std::string_view name) const {
  return bytes(info(name));
}

std::span<const std::byte> SafetensorsFile::bytes(const TensorInfo& info) const {
  MAXCTX_CHECK(info.end <= data_size_, "tensor '{}' is not from this file", info.name);
  return {data_ + info.begin, static_cast<size_t>(info.bytes())};
}

void SafetensorsFile::read_f32(std::string_view name, const std::vector<int64_t>& expected_shape,
                               std::span<float> out) const {
  const TensorInfo& found = info(name);
  check_shape(path_, found, expected_shape);
  MAXCTX_CHECK_EQ(out.size(), static_cast<size_t>(found.numel()),
                  "output buffer for '{}' must hold exactly its elements", name);
  const std::byte* in = data_ + found.begin;
  switch (found.dtype) {
    case StDType::kF32:
      if (!out.empty()) std::memcpy(out.data(), in, out.size_bytes());  // empty: data() may be null
      return;
    case StDType::kBF16:
      for (size_t i = 0; i < out.size(); ++i)
        out[i] = bf16_to_float(bf16{load<uint16_t>(in + 2 * i)});
      return;
    case StDType::kF16:
      for (size_t i = 0; i < out.size(); ++i) out[i] = f16_to_f32(load<uint16_t>(in + 2 * i));
      return;
    default:
      bad_file(path_, "tensor '{}' is {}; only F32, BF16 and F16 tensors read as f32", name,
               st_dtype_name(found.dtype));
  }
}

std::vector<float> SafetensorsFile::read_f32(std::string_view name,
                                             const std::vector<int64_t>& expected_shape) const {
  const TensorInfo& found = info(name);
  check_shape(path_, found, expected_shape);
  std::vector<float> out(static_cast<size_t>(found.numel()));
  read_f32(name, expected_shape, out);
  return out;
}

void SafetensorsFile::read_f32_into(std::string_view name, const TensorView& out) const {
  MAXCTX_CHECK(out.dtype() == DType::kF32, "read_f32 needs an f32 view for '{}', got {}", name,
               dtype_name(out.dtype()));
  std::vector<int64_t> shape;
  for (int d = 0; d < out.shape().rank(); ++d) shape.push_back(out.shape()[d]);
  read_f32(name, shape, out.span<float>());
}

void SafetensorsFile::read_into(std::string_view name, const TensorView& out) const {
  if (out.dtype() == DType::kF32) return read_f32_into(name, out);
  MAXCTX_CHECK(out.dtype() == DType::kBF16, "tensor '{}' reads into f32 or bf16, not {}", name,
               dtype_name(out.dtype()));
  std::vector<int64_t> shape;
  for (int d = 0; d < out.shape().rank(); ++d) shape.push_back(out.shape()[d]);
  const TensorInfo& found = info(name);
  check_shape(path_, found, shape);
  const std::span<bf16> values = out.span<bf16>();
  const std::byte* in = data_ + found.begin;
  switch (found.dtype) {
    case StDType::kBF16:
      if (!values.empty()) std::memcpy(values.data(), in, values.size_bytes());
      return;
    case StDType::kF32:
      for (size_t i = 0; i < values.size(); ++i) values[i] = float_to_bf16(load<float>(in + 4 * i));
      return;
    case StDType::kF16:
      for (size_t i = 0; i < values.size(); ++i) {
        values[i] = float_to_bf16(f16_to_f32(load<uint16_t>(in + 2 * i)));
      }
      return;
    default:
      bad_file(path_, "tensor '{}' is {}; only F32, BF16 and F16 tensors read as weights", name,
               st_dtype_name(found.dtype));
  }
}

StDType st_dtype_of(DType dtype) {
  switch (dtype) {
    case DType::kF32:
      return StDType::kF32;
    case DType::kBF16:
      return StDType::kBF16;
    case DType::kI8:
      return StDType::kI8;
  }
  MAXCTX_CHECK(false, "unknown dtype {}", static_cast<int>(dtype));
  return StDType::kF32;
}

std::vector<int32_t> SafetensorsFile::read_i32(std::string_view name,
                                               const std::vector<int64_t>& expected_shape) const {
  const TensorInfo& found = info(name);
  check_shape(path_, found, expected_shape);
  std::vector<int32_t> out(static_cast<size_t>(found.numel()));
  const std::byte* in = data_ + found.begin;
  switch (found.dtype) {
    case StDType::kI32:
      narrow_to_i32<int32_t>(path_, found, in, out);
      break;
    case StDType::kI64:
      narrow_to_i32<int64_t>(path_, found, in, out);
      break;
    case StDType::kU32:
      narrow_to_i32<uint32_t>(path_, found, in, out);
      break;
    case StDType::kU64:
      narrow_to_i32<uint64_t>(path_, found, in, out);
      break;
    case StDType::kI16:
      narrow_to_i32<int16_t>(path_, found, in, out);
      break;
    case StDType::kU16:
      narrow_to_i32<uint16_t>(path_, found, in, out);
      break;
    case StDType::kI8:
      narrow_to_i32<int8_t>(path_, found, in, out);
      break;
    case StDType::kU8:
      narrow_to_i32<uint8_t>(path_, found, in, out);
      break;
    default:
      bad_file(path_, "tensor '{}' is {}; only integer tensors read as int32", name,
               st_dtype_name(found.dtype));
  }
  return out;
}

SafetensorsLayout safetensors_layout(const std::filesystem::path& path,
                                     std::span<const TensorHeader> tensors,
                                     const std::map<std::string, std::string>& metadata,
                                     uint64_t data_alignment) {
  const auto bad_write = [&](const std::string& what) {
    fail("cannot write safetensors file '{}': {}", path.string(), what);
  };
  SafetensorsLayout layout;
  for (const TensorHeader& tensor : tensors) {
    if (tensor.name == kMetadataKey)
      bad_write("'__metadata__' is reserved and cannot name a tensor");
    const std::optional<int64_t> numel = checked_numel(tensor.shape);
    if (!numel) {
      bad_write(fmt::format("tensor '{}' has an invalid shape {}", tensor.name,
                            shape_string(tensor.shape)));
    }
    layout.sizes.push_back(static_cast<uint64_t>(*numel) * element_size(tensor.dtype));
    layout.order.push_back(layout.order.size());
  }
  std::sort(layout.order.begin(), layout.order.end(),
            [&](size_t a, size_t b) { return tensors[a].name < tensors[b].name; });
  for (size_t i = 1; i < layout.order.size(); ++i) {
    if (tensors[layout.order[i]].name == tensors[layout.order[i - 1]].name) {
      bad_write(fmt::format("tensor name '{}' is given twice", tensors[layout.order[i]].name));
    }
  }

  // Metadata first, then tensors in the order their bytes follow, as the reference writer does.
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty()) header[std::string(kMetadataKey)] = metadata;
  uint64_t offset = 0;
  for (const size_t i : layout.order) {
    header[tensors[i].name] = {{"dtype", st_dtype_name(tensors[i].dtype)},
                               {"shape", tensors[i].shape},
                               {"data_offsets", {offset, offset + layout.sizes[i]}}};
    offset += layout.sizes[i];
  }
  layout.data_bytes = offset;
  std::string header_text;
  try {
    header_text = header.dump();
  } catch (const nlohmann::json::exception& e) {
    bad_write(fmt::format("a tensor name or metadata string is not valid UTF-8 ({})", e.what()));
  }
  // Spaces are JSON whitespace: padding puts the data section (after the 8-byte length and the
  // JSON) on the asked boundary.
  MAXCTX_CHECK(data_alignment >= 8 && std::has_single_bit(data_alignment),
               "data alignment {} is not a power of two of at least 8", data_alignment);
  const uint64_t unpadded = sizeof(uint64_t) + header_text.size();
  header_text.append((data_alignment - unpadded % data_alignment) % data_alignment, ' ');
  const uint64_t header_size = header_text.size();
  layout.header.resize(sizeof(header_size));
  std::memcpy(layout.header.data(), &header_size, sizeof(header_size));
  layout.header += header_text;
  return layout;
}

void write_safetensors_streamed(
    const std::filesystem::path& path, std::span<const TensorHeader> tensors,
    const std::map<std::string, std::string>& metadata,
    const std::function<std::span<const std::byte>(size_t index)>& bytes_of) {
  const auto bad_write = [&](const std::string& what) {
    fail("cannot write safetensors file '{}': {}", path.string(), what);
  };
  const SafetensorsLayout layout = safetensors_layout(path, tensors, metadata, 8);
  const std::vector<size_t>& order = layout.order;
  const std::vector<uint64_t>& sizes = layout.sizes;

  std::filesystem::path tmp = path;
  tmp += ".tmp";
  // O_NOFOLLOW: a symlink planted at the name must not redirect the write (issue #34 N7).
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0644);
  if (fd < 0) bad_write(fmt::format("cannot create '{}': {}", tmp.string(), errno_text()));
  std::string reason;
  bool ok = true;
  try {
    ok = write_all(fd, reinterpret_cast<const std::byte*>(layout.header.data()),
                   layout.header.size());
    for (size_t k = 0; ok && k < order.size(); ++k) {
      const std::span<const std::byte> data = bytes_of(order[k]);
      if (data.size() != sizes[order[k]]) {
        reason = fmt::format("tensor '{}' ({} {}) needs {} bytes, got {}", tensors[order[k]].name,
                             st_dtype_name(tensors[order[k]].dtype),
                             shape_string(tensors[order[k]].shape), sizes[order[k]], data.size());
        break;
      }
      ok = write_all(fd, data.data(), data.size());
    }
  } catch (...) {
    ::close(fd);
    ::unlink(tmp.c_str());
    throw;
  }
  if (ok && reason.empty()) {
    ok = ::fsync(fd) == 0;
    if (!ok) reason = errno_text();
  } else if (!ok) {
    reason = errno_text();
  }
  reason = close_and_rename(fd, tmp, path, std::move(reason));
  if (!reason.empty()) bad_write(reason);
}

void write_safetensors(const std::filesystem::path& path, std::span<const TensorToWrite> tensors,
                       const std::map<std::string, std::string>& metadata) {
  std::vector<TensorHeader> headers;
  for (const TensorToWrite& tensor : tensors) {
    headers.push_back({tensor.name, tensor.dtype, tensor.shape});
  }
  write_safetensors_streamed(path, headers, metadata, [&](size_t i) { return tensors[i].data; });
}

SafetensorsCheckpoint::SafetensorsCheckpoint(const std::filesystem::path& path) : origin_(path) {
  std::error_code ec;
  std::filesystem::path index_path;
  std::filesystem::path single_path;
  if (std::filesystem::is_directory(path, ec)) {
    // symlink_status: a looping or dangling name is there, and opening it says what it is.
    if (std::filesystem::exists(std::filesystem::symlink_status(path / kIndexName, ec))) {
      index_path = path / kIndexName;
    } else if (std::filesystem::exists(path / kSingleName, ec)) {
      single_path = path / kSingleName;
    } else {
      fail("checkpoint directory '{}' has neither {} nor {}", path.string(), kIndexName,
           kSingleName);
    }
  } else if (!std::filesystem::exists(path, ec)) {
    fail("checkpoint '{}' does not exist; expected a directory, a {} or a .safetensors file",
         path.string(), kIndexName);
  } else if (path.extension() == ".json") {
    index_path = path;
  } else {
    single_path = path;
  }

  if (!single_path.empty()) {
    dir_ = single_path.parent_path();
    auto file = std::make_unique<SafetensorsFile>(single_path);
    const std::string shard = single_path.filename().string();
    for (const TensorInfo& info : file->tensors()) weight_map_.emplace(info.name, shard);
    shards_.emplace(shard, std::move(file));
    return;
  }

  dir_ = index_path.parent_path();
  const auto bad_index = [&](const std::string& what) {
    fail("checkpoint index '{}': {}", index_path.string(), what);
  };
  // Real indexes are tens of KB to a few MB (one line per tensor).
  const std::string text = read_input_file(index_path, "checkpoint index", 256 * kMiB);
  if (const JsonCheck check = check_json(text); check.too_deep) bad_index(*check.error);
  json index;
  try {
    index = json::parse(text);
  } catch (const json::exception& e) {
    bad_index(fmt::format("not valid JSON ({})", e.what()));
  }
  if (!index.is_object() || !index.contains("weight_map") || !index["weight_map"].is_object()) {
    bad_index("expected an object with a \"weight_map\" object {tensor name: shard file}");
  }
  for (const auto& [name, shard] : index["weight_map"].items()) {
    if (!shard.is_string()) {
      bad_index(fmt::format("weight_map['{}'] is a JSON {}, expected a shard file name", name,
                            shard.type_name()));
    }
    const std::string file = shard.get<std::string>();
    if (file.empty() || file == "." || file == ".." || file.find('/') != std::string::npos) {
      bad_index(
          fmt::format("weight_map['{}'] names '{}'; shard names must be plain file names "
                      "in the index's directory",
                      name, file));
    }
    weight_map_.emplace(name, file);
  }
  if (weight_map_.empty()) bad_index("weight_map is empty; a checkpoint needs tensors");
}

SafetensorsCheckpoint::~SafetensorsCheckpoint() = default;
SafetensorsCheckpoint::SafetensorsCheckpoint(SafetensorsCheckpoint&&) noexcept = default;
SafetensorsCheckpoint& SafetensorsCheckpoint::operator=(SafetensorsCheckpoint&&) noexcept = default;

std::vector<std::string> SafetensorsCheckpoint::tensor_names() const {
  std::vector<std::string> names;
  for (const auto& [name, shard] : weight_map_) names.push_back(name);
  return names;
}

bool SafetensorsCheckpoint::contains(std::string_view name) const {
  return weight_map_.find(name) != weight_map_.end();
}

size_t SafetensorsCheckpoint::num_shards() const {
  std::set<std::string_view> shards;
  for (const auto& [name, shard] : weight_map_) shards.insert(shard);
  return shards.size();
}

size_t SafetensorsCheckpoint::num_open_shards() const { return shards_.size(); }

const SafetensorsFile& SafetensorsCheckpoint::file_for(std::string_view name) const {
  const auto it = weight_map_.find(name);
  if (it == weight_map_.end()) {
    fail("checkpoint '{}' has no tensor '{}'; {}", origin_.string(), name,
         closest_names(name, tensor_names()));
  }
  const std::string& shard = it->second;
  auto open = shards_.find(shard);
  if (open == shards_.end()) {
    open = shards_.emplace(shard, std::make_unique<SafetensorsFile>(dir_ / shard)).first;
  }
  if (!open->second->contains(name)) {
    fail("checkpoint '{}' maps tensor '{}' to shard '{}', but that shard has no such tensor",
         origin_.string(), name, shard);
  }
  return *open->second;
}

void SafetensorsCheckpoint::verify() const {
  for (const auto& [name, shard] : weight_map_) file_for(name);
}

}  // namespace maxctx::io

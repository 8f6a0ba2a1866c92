#include "maxctx/io/gguf.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <iterator>
#include <limits>
#include <type_traits>

#include "maxctx/core/check.h"
#include "maxctx/core/dtype.h"
#include "maxctx/core/input_file.h"
#include "maxctx/io/safetensors.h"

namespace maxctx::io {
namespace {

namespace fs = std::filesystem;

constexpr int64_t kBlock = 32;  // elements per Q8_0 / Q4_0 / Q4_1 block

// GGUF's metadata value types are 0..12: the scalar readers below are indexed by them, and 9 is
// an array of one scalar type.
constexpr uint32_t kArray = 9;

// Bytes of one block (or one element for the float types) and elements per block.
struct TypeLayout {
  uint64_t block_bytes;
  int64_t block_elements;
};

bool layout_of(uint32_t type, TypeLayout& out) {
  switch (static_cast<GgmlType>(type)) {
    case GgmlType::kF32:
      return out = {4, 1}, true;
    case GgmlType::kF16:
    case GgmlType::kBF16:
      return out = {2, 1}, true;
    case GgmlType::kQ8_0:
      return out = {2 + 32, kBlock}, true;
    case GgmlType::kQ4_0:
      return out = {2 + 16, kBlock}, true;
    case GgmlType::kQ4_1:
      return out = {2 + 2 + 16, kBlock}, true;
  }
  return false;
}

// A bounds-checked cursor over the header bytes.
class Cursor {
 public:
  Cursor(InputFile& in, uint64_t size, const fs::path& path) : in_(in), size_(size), path_(path) {}
  template <typename T>
  T read() {
    T value;
    bytes(&value, sizeof(T));
    return value;
  }
  void bytes(void* out, uint64_t n) {
    if (n > size_ - position_) {
      fail("{}: GGUF header runs past the end of the file ({} bytes)", path_.string(), size_);
    }
    if (in_.read_at(out, static_cast<int64_t>(n), static_cast<int64_t>(position_)) !=
        static_cast<int64_t>(n)) {
      fail("{}: the file ended while its GGUF header was read", path_.string());
    }
    position_ += n;
  }
  std::string string() {
    const uint64_t n = read<uint64_t>();
    if (n > size_ - position_) {
      fail("{}: a GGUF string of {} bytes runs past the end of the file", path_.string(), n);
    }
    std::string s(n, '\0');
    bytes(s.data(), n);
    return s;
  }
  uint64_t position() const { return position_; }
  uint64_t size() const { return size_; }

 private:
  InputFile& in_;
  uint64_t size_;
  uint64_t position_ = 0;
  const fs::path& path_;
};

// One scalar of type T, widened to the variant's int64, uint64 or double.
template <typename T>
GgufScalar widen(Cursor& c) {
  const T value = c.read<T>();
  if constexpr (std::is_floating_point_v<T>) return static_cast<double>(value);
  if constexpr (std::is_signed_v<T>) return static_cast<int64_t>(value);
  return static_cast<uint64_t>(value);
}
GgufScalar read_bool(Cursor& c) { return c.read<uint8_t>() != 0; }
GgufScalar read_string(Cursor& c) { return c.string(); }

GgufScalar read_scalar(Cursor& c, uint32_t type, const fs::path& path, const std::string& key) {
  // Indexed by the value type; arrays (kArray) are read by the caller.
  using Reader = GgufScalar (*)(Cursor&);
  static constexpr Reader kReaders[] = {
      &widen<uint8_t>,  &widen<int8_t>,  &widen<uint16_t>, &widen<int16_t>, &widen<uint32_t>,
      &widen<int32_t>,  &widen<float>,   &read_bool,       &read_string,    nullptr,
      &widen<uint64_t>, &widen<int64_t>, &widen<double>};
  if (type >= std::size(kReaders) || kReaders[type] == nullptr) {
    fail("{}: metadata '{}' has value type {}, which GGUF does not define here", path.string(), key,
         type);
  }
  return kReaders[type](c);
}

}  // namespace

std::string ggml_type_name(uint32_t type) {
  switch (static_cast<GgmlType>(type)) {
    case GgmlType::kF32:
      return "F32";
    case GgmlType::kF16:
      return "F16";
    case GgmlType::kBF16:
      return "BF16";
    case GgmlType::kQ8_0:
      return "Q8_0";
    case GgmlType::kQ4_0:
      return "Q4_0";
    case GgmlType::kQ4_1:
      return "Q4_1";
  }
  return fmt::format("type {}", type);
}

int64_t GgufTensor::numel() const {
  int64_t n = 1;
  for (const int64_t d : shape) n *= d;
  return n;
}

GgufFile::GgufFile(const fs::path& path) : path_(path) {
  InputFile in(path, "GGUF file", kAnySize);
  const auto size = static_cast<uint64_t>(in.size());
  Cursor c(in, size, path);
  char magic[4];
  c.bytes(magic, 4);
  if (std::memcmp(magic, "GGUF", 4) != 0) fail("{}: not a GGUF file (bad magic)", path.string());
  version_ = c.read<uint32_t>();
  if (version_ != 2 && version_ != 3) {
    fail("{}: GGUF version {} is not supported (this build reads 2 and 3)", path.string(),
         version_);
  }
  const uint64_t tensor_count = c.read<uint64_t>();
  const uint64_t kv_count = c.read<uint64_t>();
  // Every entry takes at least 8 bytes, so a count beyond the file's size is damage.
  if (tensor_count > size / 8 || kv_count > size / 8) {
    fail("{}: GGUF header claims {} tensors and {} metadata entries, more than the file holds",
         path.string(), tensor_count, kv_count);
  }
  for (uint64_t i = 0; i < kv_count; ++i) {
    const std::string key = c.string();
    const uint32_t type = c.read<uint32_t>();
    GgufValue value;
    if (type == kArray) {
      value.is_array = true;
      const uint32_t element = c.read<uint32_t>();
      const uint64_t n = c.read<uint64_t>();
      if (element == kArray) fail("{}: metadata '{}' is an array of arrays", path.string(), key);
      if (n > c.size() - c.position()) {
        fail("{}: metadata '{}' claims {} elements, more than the file holds", path.string(), key,
             n);
      }
      // Reserved up to a bound: an element may be one byte in the file but a variant here.
      value.array.reserve(std::min<uint64_t>(n, uint64_t{1} << 16));
      for (uint64_t k = 0; k < n; ++k) value.array.push_back(read_scalar(c, element, path, key));
    } else {
      value.scalar = read_scalar(c, type, path, key);
    }
    if (!metadata_.emplace(key, std::move(value)).second) {
      fail("{}: metadata key '{}' is given twice", path.string(), key);
    }
  }
  for (uint64_t i = 0; i < tensor_count; ++i) {
    GgufTensor t;
    t.name = c.string();
    const uint32_t dims = c.read<uint32_t>();
    if (dims == 0 || dims > 4)
      fail("{}: tensor '{}' has {} dimensions", path.string(), t.name, dims);
    uint64_t elements = 1;
    for (uint32_t d = 0; d < dims; ++d) {
      const uint64_t ne = c.read<uint64_t>();
      if (ne == 0 || ne > (uint64_t{1} << 40)) {
        fail("{}: tensor '{}' dimension {} is {}", path.string(), t.name, d, ne);
      }
      // The element count must fit the file (a byte holds at most two 4-bit elements), which
      // also keeps numel() and the byte size from overflowing.
      if (ne > (size * 2 + 1) / elements) {
        fail("{}: tensor '{}' has more elements than the file can hold", path.string(), t.name);
      }
      elements *= ne;
      t.shape.insert(t.shape.begin(), static_cast<int64_t>(ne));
    }
    t.type = c.read<uint32_t>();
    t.offset = c.read<uint64_t>();
    tensors_.push_back(std::move(t));
  }
  const uint64_t alignment = has("general.alignment") ? integer("general.alignment") : 32;
  if (alignment == 0 || (alignment & (alignment - 1)) != 0) {
    fail("{}: general.alignment = {} is not a power of two", path.string(), alignment);
  }
  const uint64_t data = (c.position() + alignment - 1) / alignment * alignment;
  std::vector<std::pair<uint64_t, uint64_t>> ranges;
  for (GgufTensor& t : tensors_) {
    TypeLayout layout{};
    if (!layout_of(t.type, layout)) {
      fail("{}: tensor '{}' is {}; maxctx reads F32, F16, BF16, Q8_0, Q4_0 and Q4_1", path.string(),
           t.name, ggml_type_name(t.type));
    }
    const int64_t cols = t.shape.back();
    if (cols % layout.block_elements != 0) {
      fail("{}: tensor '{}' ({}) has rows of {} elements, not whole blocks of {}", path.string(),
           t.name, ggml_type_name(t.type), cols, layout.block_elements);
    }
    t.bytes = static_cast<uint64_t>(t.numel() / layout.block_elements) * layout.block_bytes;
    if (t.offset > size - data || t.bytes > size - data - t.offset) {
      fail("{}: tensor '{}' lies outside the file", path.string(), t.name);
    }
    t.offset += data;
    ranges.emplace_back(t.offset, t.offset + t.bytes);
  }
  std::sort(ranges.begin(), ranges.end());
  for (size_t i = 1; i < ranges.size(); ++i) {
    if (ranges[i].first < ranges[i - 1].second) fail("{}: tensors overlap", path.string());
  }
  std::vector<std::string> names;
  for (const GgufTensor& t : tensors_) names.push_back(t.name);
  std::sort(names.begin(), names.end());
  if (std::adjacent_find(names.begin(), names.end()) != names.end()) {
    fail("{}: a tensor name is given twice", path.string());
  }
}

const GgufTensor* GgufFile::find(const std::string& name) const {
  for (const GgufTensor& t : tensors_) {
    if (t.name == name) return &t;
  }
  return nullptr;
}

namespace {

const GgufValue& value_of(const std::map<std::string, GgufValue>& metadata, const std::string& key,
                          const fs::path& path) {
  const auto it = metadata.find(key);
  if (it == metadata.end()) fail("{}: GGUF metadata has no '{}'", path.string(), key);
  return it->second;
}

template <typename T>
T scalar_as(const GgufScalar& s, const std::string& key, const fs::path& path, const char* what) {
  if constexpr (std::is_same_v<T, int64_t>) {
    if (const auto* v = std::get_if<int64_t>(&s)) return *v;
    if (const auto* v = std::get_if<uint64_t>(&s)) {
      if (*v <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
        return static_cast<int64_t>(*v);
      }
    }
  } else if constexpr (std::is_same_v<T, double>) {
    if (const auto* v = std::get_if<double>(&s)) return *v;
    if (const auto* v = std::get_if<int64_t>(&s)) return static_cast<double>(*v);
    if (const auto* v = std::get_if<uint64_t>(&s)) return static_cast<double>(*v);
  } else {
    if (const auto* v = std::get_if<std::string>(&s)) return *v;
  }
  fail("{}: GGUF metadata '{}' is not {}", path.string(), key, what);
}

}  // namespace

int64_t GgufFile::integer(const std::string& key) const {
  const GgufValue& v = value_of(metadata_, key, path_);
  if (v.is_array) fail("{}: GGUF metadata '{}' is an array, not an integer", path_.string(), key);
  return scalar_as<int64_t>(v.scalar, key, path_, "an integer");
}

double GgufFile::number(const std::string& key) const {
  const GgufValue& v = value_of(metadata_, key, path_);
  if (v.is_array) fail("{}: GGUF metadata '{}' is an array, not a number", path_.string(), key);
  return scalar_as<double>(v.scalar, key, path_, "a number");
}

std::string GgufFile::string(const std::string& key) const {
  const GgufValue& v = value_of(metadata_, key, path_);
  if (v.is_array) fail("{}: GGUF metadata '{}' is an array, not a string", path_.string(), key);
  return scalar_as<std::string>(v.scalar, key, path_, "a string");
}

std::vector<std::string> GgufFile::strings(const std::string& key) const {
  const GgufValue& v = value_of(metadata_, key, path_);
  if (!v.is_array) fail("{}: GGUF metadata '{}' is not an array", path_.string(), key);
  std::vector<std::string> out;
  out.reserve(v.array.size());
  for (const GgufScalar& s : v.array)
    out.push_back(scalar_as<std::string>(s, key, path_, "strings"));
  return out;
}

std::vector<int64_t> GgufFile::integers(const std::string& key) const {
  const GgufValue& v = value_of(metadata_, key, path_);
  if (!v.is_array) fail("{}: GGUF metadata '{}' is not an array", path_.string(), key);
  std::vector<int64_t> out;
  out.reserve(v.array.size());
  for (const GgufScalar& s : v.array) out.push_back(scalar_as<int64_t>(s, key, path_, "integers"));
  return out;
}

std::vector<unsigned char> GgufFile::read_bytes(const GgufTensor& t) const {
  InputFile in(path_, "GGUF file", kAnySize);
  std::vector<unsigned char> raw(t.bytes);
  const auto bytes = static_cast<int64_t>(t.bytes);
  if (in.read_at(raw.data(), bytes, static_cast<int64_t>(t.offset)) != bytes) {
    fail("{}: the file ended inside tensor '{}'", path_.string(), t.name);
  }
  return raw;
}

GgufFile::Q8Blocks GgufFile::read_q8_0(const GgufTensor& t) const {
  if (static_cast<GgmlType>(t.type) != GgmlType::kQ8_0) {
    fail("{}: tensor '{}' is {}, not Q8_0", path_.string(), t.name, ggml_type_name(t.type));
  }
  const std::vector<unsigned char> raw = read_bytes(t);
  Q8Blocks out;
  out.codes.resize(static_cast<size_t>(t.numel()));
  out.scales.resize(out.codes.size() / kBlock);
  for (size_t b = 0; b < out.scales.size(); ++b) {
    const unsigned char* block = raw.data() + b * 34;  // f16 scale, then 32 codes
    uint16_t d;
    std::memcpy(&d, block, 2);
    out.scales[b] = f16_to_f32(d);
    std::memcpy(out.codes.data() + b * kBlock, block + 2, kBlock);
  }
  return out;
}

std::vector<float> GgufFile::read_f32(const GgufTensor& t) const {
  const std::vector<unsigned char> raw = read_bytes(t);
  const auto u16 = [&](uint64_t at) {
    uint16_t v;
    std::memcpy(&v, raw.data() + at, 2);
    return v;
  };
  std::vector<float> out(static_cast<size_t>(t.numel()));
  const auto blocks = static_cast<int64_t>(out.size()) / kBlock;
  switch (static_cast<GgmlType>(t.type)) {
    case GgmlType::kF32:
      std::memcpy(out.data(), raw.data(), t.bytes);
      break;
    case GgmlType::kF16:
      for (size_t i = 0; i < out.size(); ++i) out[i] = f16_to_f32(u16(2 * i));
      break;
    case GgmlType::kBF16:
      for (size_t i = 0; i < out.size(); ++i) out[i] = bf16_to_float(bf16{u16(2 * i)});
      break;
    case GgmlType::kQ8_0:
      for (int64_t b = 0; b < blocks; ++b) {
        const uint64_t at = static_cast<uint64_t>(b) * 34;
        const float d = f16_to_f32(u16(at));
        for (int64_t j = 0; j < kBlock; ++j) {
          out[b * kBlock + j] = d * static_cast<float>(static_cast<int8_t>(raw[at + 2 + j]));
        }
      }
      break;
    case GgmlType::kQ4_0:
    case GgmlType::kQ4_1: {
      // Element j < 16 is the low nibble of byte j, element j + 16 its high nibble.
      const bool with_min = static_cast<GgmlType>(t.type) == GgmlType::kQ4_1;
      const uint64_t block_bytes = with_min ? 20 : 18;
      for (int64_t b = 0; b < blocks; ++b) {
        const uint64_t at = static_cast<uint64_t>(b) * block_bytes;
        const float d = f16_to_f32(u16(at));
        const float m = with_min ? f16_to_f32(u16(at + 2)) : 0.0f;
        const unsigned char* qs = raw.data() + at + (with_min ? 4 : 2);
        for (int64_t j = 0; j < 16; ++j) {
          const int lo = qs[j] & 0x0F, hi = qs[j] >> 4;
          out[b * kBlock + j] = with_min ? d * lo + m : d * (lo - 8);
          out[b * kBlock + j + 16] = with_min ? d * hi + m : d * (hi - 8);
        }
      }
      break;
    }
  }
  return out;
}

}  // namespace maxctx::io

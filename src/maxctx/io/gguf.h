// GGUF files (llama.cpp's format, versions 2 and 3): the metadata and the tensors, read and
// dequantized to f32.
//
//   "GGUF", uint32 version, uint64 tensor count, uint64 metadata count,
//   metadata: (string key, uint32 type, value)*, tensor infos: (string name, uint32 n_dims,
//   uint64 ne[n_dims], uint32 ggml type, uint64 offset)*, padding to general.alignment (32),
//   then the tensor data, each tensor at its offset. Strings are uint64 length + bytes.
//
// ne[0] is the fastest-moving dimension, so a tensor of ne = [C, R] is row-major [R, C]: the
// same layout as a safetensors [R, C]. Tensor types read: F32, F16, BF16, and the 32-element
// block quantizations Q8_0 (f16 scale, 32 int8), Q4_0 (f16 scale, 32 nibbles - 8) and Q4_1 (f16
// scale, f16 minimum, 32 nibbles); any other type is refused naming it and the tensor. This is a
// reader only: what the tensors mean is model/gguf_import's.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <string>
#include <variant>
#include <vector>

namespace maxctx::io {

// One metadata value: a scalar, a string, or an array of them (arrays of arrays are refused).
using GgufScalar = std::variant<int64_t, uint64_t, double, bool, std::string>;
struct GgufValue {
  GgufScalar scalar;              // when !is_array
  std::vector<GgufScalar> array;  // when is_array
  bool is_array = false;
};

enum class GgmlType : uint32_t { kF32 = 0, kF16 = 1, kQ4_0 = 2, kQ4_1 = 3, kQ8_0 = 8, kBF16 = 30 };
// "F32", "Q4_0", ...; "type <n>" for a number this reader does not know.
std::string ggml_type_name(uint32_t type);

struct GgufTensor {
  std::string name;
  uint32_t type = 0;           // a GgmlType value (checked when read)
  std::vector<int64_t> shape;  // row-major: ne reversed ([R, C] for ne = [C, R])
  uint64_t offset = 0;         // from the start of the file
  uint64_t bytes = 0;
  int64_t numel() const;
};

class GgufFile {
 public:
  // Reads the header, metadata and tensor infos (not the data). Every problem is a
  // maxctx::Error naming the file: bad magic, unknown version or value type, a string or array
  // longer than the file, tensors outside the file or overlapping, a duplicate name.
  explicit GgufFile(const std::filesystem::path& path);

  const std::filesystem::path& path() const { return path_; }
  uint32_t version() const { return version_; }
  const std::map<std::string, GgufValue>& metadata() const { return metadata_; }
  const std::vector<GgufTensor>& tensors() const { return tensors_; }
  const GgufTensor* find(const std::string& name) const;

  // Metadata accessors: an absent key or one of another type is an error naming the key.
  bool has(const std::string& key) const { return metadata_.count(key) != 0; }
  int64_t integer(const std::string& key) const;
  double number(const std::string& key) const;
  std::string string(const std::string& key) const;
  std::vector<std::string> strings(const std::string& key) const;
  std::vector<int64_t> integers(const std::string& key) const;

  // The tensor's elements as f32, row-major.
  std::vector<float> read_f32(const GgufTensor& tensor) const;

  // A Q8_0 tensor's blocks as stored: element i is codes[i] · scales[i / 32] (the f16 block scale
  // widened, exactly). Another type is an error naming the tensor.
  struct Q8Blocks {
    std::vector<int8_t> codes;  // (numel)
    std::vector<float> scales;  // (numel / 32)
  };
  Q8Blocks read_q8_0(const GgufTensor& tensor) const;

 private:
  std::vector<unsigned char> read_bytes(const GgufTensor& tensor) const;

  std::filesystem::path path_;
  uint32_t version_ = 0;
  std::map<std::string, GgufValue> metadata_;
  std::vector<GgufTensor> tensors_;
};

}  // namespace maxctx::io

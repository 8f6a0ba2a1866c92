// TensorBoard event files (see tensorboard.h). The three messages are encoded here in protobuf's
// wire format (field numbers from tensorboard_event.proto, TensorFlow's) rather than by
// protobuf's generated code: Debian's libsentencepiece0 (0.1.97) carries its own protobuf-lite
// and exports its symbols, and a binary that also links libprotobuf.so.32 crashes while
// registering its descriptors at startup. tests/observe/tensorboard_schema_test parses what is
// written here with protobuf's generated code (a binary without sentencepiece), and TensorBoard's
// own reader loaded it once (tools/reference/README.md).
#include "maxctx/io/tensorboard.h"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <chrono>
#include <cstring>

#include "maxctx/core/check.h"

namespace maxctx {
namespace {

// Table of the reflected CRC-32C polynomial 0x82f63b78, byte at a time.
std::array<uint32_t, 256> crc32c_table() {
  std::array<uint32_t, 256> table{};
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t crc = i;
    for (int bit = 0; bit < 8; ++bit) crc = (crc >> 1) ^ ((crc & 1u) != 0 ? 0x82f63b78u : 0u);
    table[i] = crc;
  }
  return table;
}

double unix_seconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

void put_le(std::string& out, uint64_t value, int bytes) {
  for (int i = 0; i < bytes; ++i) out += static_cast<char>((value >> (8 * i)) & 0xffu);
}

uint64_t get_le(const unsigned char* in, int bytes) {
  uint64_t value = 0;
  for (int i = 0; i < bytes; ++i) value |= static_cast<uint64_t>(in[i]) << (8 * i);
  return value;
}

// Protobuf wire format: a key is (field << 3 | wire type); 0 varint, 1 fixed64, 2 bytes,
// 5 fixed32.
enum WireType : uint32_t { kVarint = 0, kFixed64 = 1, kBytes = 2, kFixed32 = 5 };

void put_varint(std::string& out, uint64_t value) {
  while (value >= 0x80) {
    out += static_cast<char>((value & 0x7f) | 0x80);
    value >>= 7;
  }
  out += static_cast<char>(value);
}

void put_key(std::string& out, uint32_t field, WireType type) {
  put_varint(out, field << 3 | type);
}

void put_bytes(std::string& out, uint32_t field, const std::string& bytes) {
  put_key(out, field, kBytes);
  put_varint(out, bytes.size());
  out += bytes;
}

void put_double(std::string& out, uint32_t field, double value) {
  uint64_t bits = 0;
  std::memcpy(&bits, &value, sizeof(bits));
  put_key(out, field, kFixed64);
  put_le(out, bits, 8);
}

// Event fields: wall_time 1 (double), step 2 (int64), file_version 3, summary 5.
// Summary: value 1 (repeated Value). Value: tag 1 (string), simple_value 2 (float).
std::string event_header(double wall_time, int64_t step) {
  std::string event;
  put_double(event, 1, wall_time);
  if (step != 0) {
    put_key(event, 2, kVarint);
    put_varint(event, static_cast<uint64_t>(step));
  }
  return event;
}

std::string scalar_event(double wall_time, int64_t step, const std::string& tag, float value) {
  std::string entry;
  put_bytes(entry, 1, tag);
  uint32_t bits = 0;
  std::memcpy(&bits, &value, sizeof(bits));
  put_key(entry, 2, kFixed32);
  put_le(entry, bits, 4);
  std::string summary;
  put_bytes(summary, 1, entry);
  std::string event = event_header(wall_time, step);
  put_bytes(event, 5, summary);
  return event;
}

// A cursor over one message's bytes; every read checks the bounds (an error names `what`).
class WireReader {
 public:
  WireReader(const std::string& bytes, std::string what) : bytes_(bytes), what_(std::move(what)) {}
  bool done() const { return at_ == bytes_.size(); }
  uint64_t varint() {
    uint64_t value = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      if (at_ >= bytes_.size()) fail("{}: a varint runs past the end", what_);
      const auto byte = static_cast<unsigned char>(bytes_[at_++]);
      value |= static_cast<uint64_t>(byte & 0x7f) << shift;
      if ((byte & 0x80) == 0) return value;
    }
    fail("{}: a varint longer than 10 bytes", what_);
  }
  uint64_t fixed(int bytes) {
    if (bytes_.size() - at_ < static_cast<size_t>(bytes))
      fail("{}: a field runs past the end", what_);
    const uint64_t value =
        get_le(reinterpret_cast<const unsigned char*>(bytes_.data()) + at_, bytes);
    at_ += static_cast<size_t>(bytes);
    return value;
  }
  std::string bytes() {
    const uint64_t length = varint();
    if (length > bytes_.size() - at_)
      fail("{}: a field of {} bytes runs past the end", what_, length);
    std::string out = bytes_.substr(at_, length);
    at_ += length;
    return out;
  }
  void skip(uint32_t type) {
    switch (type) {
      case kVarint:
        varint();
        return;
      case kFixed64:
        fixed(8);
        return;
      case kBytes:
        bytes();
        return;
      case kFixed32:
        fixed(4);
        return;
      default:
        fail("{}: wire type {} is not one an Event uses", what_, type);
    }
  }

 private:
  const std::string& bytes_;
  std::string what_;
  size_t at_ = 0;
};

std::string host_name() {
  char name[256] = {};
  if (::gethostname(name, sizeof(name) - 1) != 0) return "localhost";
  return name;
}

}  // namespace

uint32_t crc32c(const void* data, size_t size) {
  static const std::array<uint32_t, 256> table = crc32c_table();
  const auto* bytes = static_cast<const unsigned char*>(data);
  uint32_t crc = 0xffffffffu;
  for (size_t i = 0; i < size; ++i) crc = table[(crc ^ bytes[i]) & 0xffu] ^ (crc >> 8);
  return crc ^ 0xffffffffu;
}

uint32_t masked_crc32c(const void* data, size_t size) {
  const uint32_t crc = crc32c(data, size);
  return ((crc >> 15) | (crc << 17)) + 0xa282ead8u;
}

TensorBoardWriter::TensorBoardWriter(const std::filesystem::path& directory)
    : file_(nullptr, &std::fclose) {
  std::error_code error;
  std::filesystem::create_directories(directory, error);
  if (error)
    fail("cannot create the TensorBoard directory {}: {}", directory.string(), error.message());
  const auto seconds = static_cast<int64_t>(unix_seconds());
  path_ = directory / ("events.out.tfevents." + std::to_string(seconds) + "." + host_name());
  // A second writer in the same second (a resumed run) gets its own file, as TensorBoard expects.
  for (int n = 1; std::filesystem::exists(path_); ++n) {
    path_ = directory / ("events.out.tfevents." + std::to_string(seconds) + "." + host_name() +
                         "." + std::to_string(n));
  }
  // "x" (O_EXCL): a new file only, never through a symlink planted at the name (issue #34 N7).
  file_.reset(std::fopen(path_.c_str(), "wbx"));
  if (file_ == nullptr)
    fail("cannot open the TensorBoard event file {}: {}", path_.string(), std::strerror(errno));
  std::string event = event_header(unix_seconds(), 0);
  put_bytes(event, 3, "brain.Event:2");
  write_record(event);
  flush();
}

TensorBoardWriter::~TensorBoardWriter() = default;

void TensorBoardWriter::add_scalars(int64_t step,
                                    const std::vector<std::pair<std::string, double>>& scalars) {
  const double wall_time = unix_seconds();
  for (const auto& [tag, value] : scalars) {
    write_record(scalar_event(wall_time, step, tag, static_cast<float>(value)));
  }
}

void TensorBoardWriter::flush() {
  if (std::fflush(file_.get()) != 0)
    fail("cannot write the TensorBoard event file {}: {}", path_.string(), std::strerror(errno));
}

void TensorBoardWriter::write_record(const std::string& data) {
  std::string record;
  put_le(record, data.size(), 8);
  put_le(record, masked_crc32c(record.data(), 8), 4);
  record += data;
  put_le(record, masked_crc32c(data.data(), data.size()), 4);
  if (std::fwrite(record.data(), 1, record.size(), file_.get()) != record.size())
    fail("cannot write the TensorBoard event file {}: {}", path_.string(), std::strerror(errno));
}

std::vector<ScalarEvent> read_scalar_events(const std::filesystem::path& file) {
  std::unique_ptr<FILE, int (*)(FILE*)> in(std::fopen(file.c_str(), "rb"), &std::fclose);
  if (in == nullptr) fail("cannot open the event file {}: {}", file.string(), std::strerror(errno));
  std::vector<ScalarEvent> scalars;
  for (int64_t index = 0;; ++index) {
    unsigned char header[12];
    const size_t got = std::fread(header, 1, sizeof(header), in.get());
    if (got == 0) break;
    if (got != sizeof(header))
      fail("{}: record {} is cut short in its header", file.string(), index);
    if (get_le(header + 8, 4) != masked_crc32c(header, 8))
      fail("{}: record {} has a bad length checksum", file.string(), index);
    const uint64_t length = get_le(header, 8);
    if (length > (uint64_t{1} << 30))
      fail("{}: record {} claims {} bytes", file.string(), index, length);
    std::string data(length, '\0');
    unsigned char footer[4];
    if (!(std::fread(data.data(), 1, length, in.get()) == length &&
          std::fread(footer, 1, 4, in.get()) == 4))
      fail("{}: record {} is cut short", file.string(), index);
    if (get_le(footer, 4) != masked_crc32c(data.data(), data.size()))
      fail("{}: record {} has a bad data checksum", file.string(), index);
    const std::string what = fmt::format("{}: record {}", file.string(), index);
    ScalarEvent head;
    std::vector<std::string> summaries;
    for (WireReader event(data, what); !event.done();) {
      const uint64_t key = event.varint();
      const auto field = static_cast<uint32_t>(key >> 3), type = static_cast<uint32_t>(key & 7);
      if (field == 1 && type == kFixed64) {
        const uint64_t bits = event.fixed(8);
        std::memcpy(&head.wall_time, &bits, sizeof(bits));
      } else if (field == 2 && type == kVarint) {
        head.step = static_cast<int64_t>(event.varint());
      } else if (field == 5 && type == kBytes) {
        summaries.push_back(event.bytes());
      } else {
        event.skip(type);
      }
    }
    for (const std::string& bytes : summaries) {
      for (WireReader summary(bytes, what); !summary.done();) {
        const uint64_t key = summary.varint();
        if (key != (1u << 3 | kBytes)) {
          summary.skip(static_cast<uint32_t>(key & 7));
          continue;
        }
        const std::string value_bytes = summary.bytes();
        ScalarEvent scalar = head;
        bool simple = false;
        for (WireReader value(value_bytes, what); !value.done();) {
          const uint64_t value_key = value.varint();
          if (value_key == (1u << 3 | kBytes)) {
            scalar.tag = value.bytes();
          } else if (value_key == (2u << 3 | kFixed32)) {
            const auto bits = static_cast<uint32_t>(value.fixed(4));
            std::memcpy(&scalar.value, &bits, sizeof(bits));
            simple = true;
          } else {
            value.skip(static_cast<uint32_t>(value_key & 7));
          }
        }
        if (simple) scalars.push_back(std::move(scalar));
      }
    }
  }
  return scalars;
}

std::vector<std::filesystem::path> event_files(const std::filesystem::path& directory) {
  std::vector<std::filesystem::path> files;
  std::error_code error;
  for (const auto& entry : std::filesystem::directory_iterator(directory, error)) {
    if (entry.path().filename().string().starts_with("events.out.tfevents.")) {
      files.push_back(entry.path());
    }
  }
  std::sort(files.begin(), files.end());
  return files;
}

}  // namespace maxctx

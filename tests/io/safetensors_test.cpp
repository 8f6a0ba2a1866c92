// Tests of the safetensors reader and writer on files this test writes: round trips of every
// dtype, the f16 conversion, each corruption case and its own message, the atomic write, and the
// sharded-checkpoint index. Files written by the Python side are in safetensors_fixtures_test.cpp.
#include "maxctx/io/safetensors.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <cmath>
#include <cstring>
#include <fstream>
#include <functional>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "io/temp_dir.h"

namespace maxctx::io {
namespace {

using testing::HasSubstr;

std::vector<char> read_file_bytes(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), {}};
}

template <typename T>
std::vector<T> iota_values(size_t n, T start, T step) {
  std::vector<T> out(n);
  for (size_t i = 0; i < n; ++i) out[i] = static_cast<T>(start + static_cast<T>(i) * step);
  return out;
}

// Raw file: 8-byte length (the real one unless `length` is given), the header text, data bytes.
void write_raw(const std::filesystem::path& path, const std::string& header, size_t data_bytes,
               std::optional<uint64_t> length = std::nullopt) {
  std::ofstream out(path, std::ios::binary);
  const uint64_t n = length.value_or(header.size());
  out.write(reinterpret_cast<const char*>(&n), sizeof(n));
  out << header;
  const std::string data(data_bytes, '\x11');
  out << data;
}

std::string error_of(const std::function<void()>& body) {
  try {
    body();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

std::string open_error(const std::filesystem::path& path) {
  return error_of([&] { SafetensorsFile file(path); });
}

TEST(SafetensorsDType, NamesSizesAndParse) {
  EXPECT_EQ(st_dtype_name(StDType::kBF16), "BF16");
  EXPECT_EQ(element_size(StDType::kI64), 8u);
  EXPECT_EQ(element_size(StDType::kF16), 2u);
  EXPECT_EQ(parse_st_dtype("U8"), StDType::kU8);
  EXPECT_EQ(parse_st_dtype("f32"), std::nullopt);  // the format spells dtypes upper case
  EXPECT_EQ(parse_st_dtype("F8_E4M3"), std::nullopt);
  EXPECT_THAT(known_st_dtypes(), HasSubstr("F32, U64, I64, F64"));
}

TEST(F16, HandValues) {
  struct Case {
    uint16_t bits;
    float value;
  };
  const Case cases[] = {
      {0x0000, 0.0f},
      {0x3c00, 1.0f},
      {0xc000, -2.0f},
      {0x3555, 0.333251953125f},
      {0x3bff, 0.99951171875f},
      {0x7bff, 65504.0f},
      {0x0400, 0x1p-14f},
      {0x0001, 0x1p-24f},
      {0x03ff, 1023 * 0x1p-24f},
      {0x8001, -0x1p-24f},
      {0x0200, 0x1p-15f},
      {0x7c00, INFINITY},
      {0xfc00, -INFINITY},
  };
  for (const Case& c : cases) {
    EXPECT_EQ(f16_to_f32(c.bits), c.value) << std::hex << c.bits;
    EXPECT_EQ(f32_to_f16(c.value), c.bits) << c.value;
  }
  EXPECT_TRUE(std::signbit(f16_to_f32(0x8000)));
  EXPECT_EQ(f16_to_f32(0x8000), 0.0f);
  EXPECT_TRUE(std::isnan(f16_to_f32(0x7e00)));
  EXPECT_TRUE(std::isnan(f16_to_f32(0x7c01)));  // signalling NaN stays a NaN, not inf
  EXPECT_TRUE(std::isnan(f16_to_f32(0xfe00)));
  EXPECT_TRUE(std::signbit(f16_to_f32(0xfe00)));
}

// Every one of the 65536 encodings against the definition (-1)^s · m · 2^e, computed with
// ldexp, and back through f32_to_f16.
TEST(F16, ExhaustiveAgainstDefinitionAndRoundTrip) {
  for (uint32_t bits = 0; bits < 0x10000; ++bits) {
    const uint16_t h = static_cast<uint16_t>(bits);
    const int exponent = (h >> 10) & 0x1f;
    const int mantissa = h & 0x3ff;
    const double sign = (h & 0x8000) ? -1.0 : 1.0;
    const float got = f16_to_f32(h);
    if (exponent == 0x1f) {
      EXPECT_EQ(std::isnan(got), mantissa != 0) << std::hex << h;
      if (mantissa == 0) {
        EXPECT_EQ(got, static_cast<float>(sign * INFINITY));
      }
      continue;
    }
    const double expected = exponent == 0 ? sign * std::ldexp(mantissa, -24)
                                          : sign * std::ldexp(1024 + mantissa, exponent - 25);
    ASSERT_EQ(got, static_cast<float>(expected)) << std::hex << h;
    ASSERT_EQ(f32_to_f16(got), h) << std::hex << h;
  }
}

TEST(F16, RoundsToNearestEven) {
  EXPECT_EQ(f32_to_f16(1.0f + 0x1p-11f), 0x3c00);             // tie, even is 1.0
  EXPECT_EQ(f32_to_f16(1.0f + 3 * 0x1p-11f), 0x3c02);         // tie, even is 1 + 2^-9
  EXPECT_EQ(f32_to_f16(1.0f + 0x1p-11f + 0x1p-20f), 0x3c01);  // above the tie
  EXPECT_EQ(f32_to_f16(65519.0f), 0x7bff);
  EXPECT_EQ(f32_to_f16(65520.0f), 0x7c00);  // tie between 65504 and 2^16: overflows
  EXPECT_EQ(f32_to_f16(-1e6f), 0xfc00);
  EXPECT_EQ(f32_to_f16(0x1p-25f), 0x0000);      // tie between 0 and the smallest subnormal
  EXPECT_EQ(f32_to_f16(3 * 0x1p-25f), 0x0002);  // tie between 1 and 2 units: even
  EXPECT_EQ(f32_to_f16(0x1p-25f + 0x1p-35f), 0x0001);
  EXPECT_EQ(f32_to_f16(1023.5f * 0x1p-24f), 0x0400);  // carries into the smallest normal
  EXPECT_EQ(f32_to_f16(1e-40f), 0x0000);              // f32 subnormal
  EXPECT_EQ(f32_to_f16(-0.0f), 0x8000);
  EXPECT_TRUE(std::isnan(f16_to_f32(f32_to_f16(NAN))));
}

// One tensor of every dtype, written and read back, bytes equal; metadata kept; file layout as
// documented (header multiple of 8, data in name order).
TEST(SafetensorsWriter, RoundTripsEveryDTypeWithMetadata) {
  TempDir dir;
  const auto f32 = iota_values<float>(6, -1.5f, 0.75f);
  std::vector<uint16_t> bf16_bits;
  std::vector<uint16_t> f16_bits;
  for (float v : f32) {
    bf16_bits.push_back(float_to_bf16(v).bits);
    f16_bits.push_back(f32_to_f16(v));
  }
  const auto i8 = iota_values<int8_t>(4, -100, 50);
  const auto i32 = iota_values<int32_t>(3, -2000000000, 1000000000);
  const auto i64 = iota_values<int64_t>(2, -5000000000, 7000000000);
  const auto u8 = iota_values<uint8_t>(5, 0, 60);
  const auto f64 = iota_values<double>(2, 0.1, 0.2);
  const std::vector<float> scalar = {3.25f};
  const std::vector<float> empty;

  const std::vector<TensorToWrite> tensors = {
      tensor_to_write<float>("w.f32", StDType::kF32, {2, 3}, f32),
      tensor_to_write<uint16_t>("w.bf16", StDType::kBF16, {3, 2}, bf16_bits),
      tensor_to_write<uint16_t>("w.f16", StDType::kF16, {6}, f16_bits),
      tensor_to_write<int8_t>("q.i8", StDType::kI8, {2, 2}, i8),
      tensor_to_write<int32_t>("tokens", StDType::kI32, {1, 3}, i32),
      tensor_to_write<int64_t>("big", StDType::kI64, {2}, i64),
      tensor_to_write<uint8_t>("bytes", StDType::kU8, {5}, u8),
      tensor_to_write<double>("f64", StDType::kF64, {2, 1}, f64),
      tensor_to_write<float>("scalar", StDType::kF32, {}, scalar),
      tensor_to_write<float>("empty", StDType::kF32, {0, 7}, empty),
  };
  const std::map<std::string, std::string> metadata = {{"format", "pt"}, {"step", "12"}};
  const auto path = dir.path() / "all.safetensors";
  write_safetensors(path, tensors, metadata);
  EXPECT_FALSE(std::filesystem::exists(path.string() + ".tmp"));

  const SafetensorsFile file(path);
  EXPECT_EQ(file.metadata(), metadata);
  ASSERT_EQ(file.tensors().size(), tensors.size());
  uint64_t previous_end = 0;
  for (const TensorInfo& info : file.tensors()) {  // sorted by name = data order
    EXPECT_EQ(info.begin, previous_end) << info.name;
    previous_end = info.end;
  }
  for (const TensorToWrite& written : tensors) {
    const TensorInfo& info = file.expect(written.name, written.dtype, written.shape);
    const auto bytes = file.bytes(info);
    ASSERT_EQ(bytes.size(), written.data.size()) << written.name;
    EXPECT_TRUE(std::equal(bytes.begin(), bytes.end(), written.data.begin())) << written.name;
  }
  EXPECT_EQ(file.read_f32("w.f32", {2, 3}), f32);
  EXPECT_EQ(file.read_f32("w.bf16", {3, 2}), f32);  // values exact in bf16 and f16
  EXPECT_EQ(file.read_f32("w.f16", {6}), f32);
  EXPECT_EQ(file.read_f32("scalar", {}), scalar);
  EXPECT_TRUE(file.read_f32("empty", {0, 7}).empty());
  EXPECT_EQ(file.read_i32("tokens", {1, 3}), std::vector<int32_t>(i32.begin(), i32.end()));
  EXPECT_EQ(file.read_i32("bytes", {5}), std::vector<int32_t>(u8.begin(), u8.end()));
  EXPECT_EQ(file.read_i32("q.i8", {2, 2}), std::vector<int32_t>(i8.begin(), i8.end()));

  Tensor into(Shape{2, 3});
  file.read_f32_into("w.f32", into.view());
  EXPECT_EQ(std::vector<float>(into.span<float>().begin(), into.span<float>().end()), f32);

  const auto raw = read_file_bytes(path);
  uint64_t header_size = 0;
  std::memcpy(&header_size, raw.data(), 8);
  EXPECT_EQ(header_size % 8, 0u);
  EXPECT_EQ(raw.size(), 8 + header_size + previous_end);
}

// A symlink planted at the temporary name (a run directory someone else can write) does not
// redirect the write to its target (issue #34 N7): the write fails, the target is untouched.
TEST(SafetensorsWriter, DoesNotWriteThroughASymlink) {
  TempDir dir;
  const auto target = dir.path() / "precious";
  { std::ofstream(target) << "precious"; }
  std::filesystem::create_symlink(target, dir.path() / "out.safetensors.tmp");
  const std::vector<float> a = {1, 2, 3};
  const std::vector<TensorToWrite> tensors = {tensor_to_write<float>("a", StDType::kF32, {3}, a)};
  EXPECT_THROW(write_safetensors(dir.path() / "out.safetensors", tensors, {}), Error);
  EXPECT_EQ(read_file_bytes(target).size(), 8u);
}

TEST(SafetensorsWriter, OutputIsIndependentOfInputOrder) {
  TempDir dir;
  const std::vector<float> a = {1, 2, 3};
  const std::vector<int32_t> b = {7};
  const std::vector<TensorToWrite> forward = {tensor_to_write<float>("a", StDType::kF32, {3}, a),
                                              tensor_to_write<int32_t>("b", StDType::kI32, {1}, b)};
  const std::vector<TensorToWrite> backward = {forward[1], forward[0]};
  write_safetensors(dir.path() / "1.safetensors", forward, {{"k", "v"}});
  write_safetensors(dir.path() / "2.safetensors", backward, {{"k", "v"}});
  EXPECT_EQ(read_file_bytes(dir.path() / "1.safetensors"),
            read_file_bytes(dir.path() / "2.safetensors"));
}

// The new file replaces the old one by rename: a reader that had the old file open keeps
// reading the old bytes in full, a new reader sees the whole new file.
TEST(SafetensorsWriter, ReplacesAtomically) {
  TempDir dir;
  const auto path = dir.path() / "ckpt.safetensors";
  const std::vector<float> old_values = {1, 2, 3, 4};
  const std::vector<float> new_values = {5, 6};
  const TensorToWrite old_tensor = tensor_to_write<float>("w", StDType::kF32, {4}, old_values);
  write_safetensors(path, std::span(&old_tensor, 1));
  const SafetensorsFile before(path);
  const TensorToWrite new_tensor = tensor_to_write<float>("w", StDType::kF32, {2}, new_values);
  write_safetensors(path, std::span(&new_tensor, 1));
  EXPECT_EQ(before.read_f32("w", {4}), old_values);
  EXPECT_EQ(SafetensorsFile(path).read_f32("w", {2}), new_values);
}

TEST(SafetensorsWriter, RejectsBadInput) {
  TempDir dir;
  const auto path = dir.path() / "bad.safetensors";
  const std::vector<float> values = {1, 2, 3};
  const auto write = [&](std::vector<TensorToWrite> tensors) {
    return error_of([&] { write_safetensors(path, tensors); });
  };
  EXPECT_THAT(write({tensor_to_write<float>("x", StDType::kF32, {3}, values),
                     tensor_to_write<float>("x", StDType::kF32, {3}, values)}),
              HasSubstr("tensor name 'x' is given twice"));
  EXPECT_THAT(write({tensor_to_write<float>("x", StDType::kF32, {2, 2}, values)}),
              HasSubstr("tensor 'x' (F32 [2, 2]) needs 16 bytes, got 12"));
  EXPECT_THAT(write({tensor_to_write<float>("__metadata__", StDType::kF32, {3}, values)}),
              HasSubstr("'__metadata__' is reserved"));
  EXPECT_THAT(write({tensor_to_write<float>("x", StDType::kF32, {-3}, values)}),
              HasSubstr("invalid shape [-3]"));
  EXPECT_THAT(error_of([&] {
                const TensorToWrite t = tensor_to_write<float>("x", StDType::kF32, {3}, values);
                write_safetensors(dir.path() / "missing_dir" / "x.safetensors", std::span(&t, 1));
              }),
              HasSubstr("cannot create"));
  EXPECT_FALSE(std::filesystem::exists(path));
}

// Each way a file can be wrong, with the part of its message that tells it apart.
struct CorruptCase {
  const char* what;
  std::string header;
  size_t data_bytes;
  std::optional<uint64_t> length;
  const char* message;
};

TEST(SafetensorsReader, EachCorruptionHasItsOwnMessage) {
  const std::string ok_entry = R"("a": {"dtype": "F32", "shape": [2, 2], "data_offsets": [0, 16]})";
  const std::vector<CorruptCase> cases = {
      {"length past EOF", "{}", 0, 4096, "header length 4096 runs past the end of the file"},
      {"not JSON", "{\"a\": ", 0, {}, "header is not valid JSON"},
      {"not an object", "[1, 2]", 0, {}, "the header is a JSON array, expected an object"},
      {"entry not an object", R"({"a": 3})", 0, {}, "entry 'a' is a JSON number"},
      {"missing field",
       R"({"a": {"dtype": "F32", "shape": [1]}})",
       4,
       {},
       "entry 'a' has no 'data_offsets' field"},
      {"dtype not a string",
       R"({"a": {"dtype": 4, "shape": [1], "data_offsets": [0, 4]}})",
       4,
       {},
       "entry 'a': dtype is a JSON number"},
      {"unknown dtype",
       R"({"a": {"dtype": "F8_E4M3", "shape": [1], "data_offsets": [0, 1]}})",
       1,
       {},
       "entry 'a' has unknown dtype 'F8_E4M3'; known dtypes: BOOL, U8"},
      {"negative dim",
       R"({"a": {"dtype": "F32", "shape": [-1], "data_offsets": [0, 4]}})",
       4,
       {},
       "entry 'a': shape must be an array of non-negative integers, got [-1]"},
      {"shape not an array",
       R"({"a": {"dtype": "F32", "shape": 3, "data_offsets": [0, 4]}})",
       4,
       {},
       "shape must be an array of non-negative integers, got 3"},
      {"huge shape",
       R"({"a": {"dtype": "F32", "shape": [4294967296, 4294967296], "data_offsets": [0, 4]}})",
       4,
       {},
       "has more elements than any file can hold"},
      {"offsets reversed",
       R"({"a": {"dtype": "F32", "shape": [0], "data_offsets": [8, 0]}})",
       8,
       {},
       "data_offsets must be [begin, end] with integers 0 <= begin <= end, got [8,0]"},
      {"offsets not integers",
       R"({"a": {"dtype": "F32", "shape": [1], "data_offsets": "0-4"}})",
       4,
       {},
       "data_offsets must be [begin, end]"},
      {"size mismatch",
       R"({"a": {"dtype": "F32", "shape": [2, 2], "data_offsets": [0, 12]}})",
       12,
       {},
       "entry 'a': F32 [2, 2] needs 16 bytes but data_offsets [0, 12] span 12 bytes"},
      {"past data section",
       "{" + ok_entry + "}",
       8,
       {},
       "entry 'a': data_offsets [0, 16] run past the end of the data section (8 bytes)"},
      {"overlap",
       "{" + ok_entry + R"(, "b": {"dtype": "I32", "shape": [2], "data_offsets": [8, 16]}})",
       16,
       {},
       "tensors 'a' [0, 16) and 'b' [8, 16) overlap"},
      {"gap",
       "{" + ok_entry + R"(, "b": {"dtype": "I32", "shape": [1], "data_offsets": [20, 24]}})",
       24,
       {},
       "bytes [16, 20) of the data section, before tensor 'b', belong to no tensor"},
      {"trailing bytes",
       "{" + ok_entry + "}",
       20,
       {},
       "the data section is 20 bytes but the tensors end at byte 16; trailing bytes"},
      {"duplicate name",
       "{" + ok_entry + R"(, "a": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]}})",
       16,
       {},
       "the header names 'a' twice"},
      {"metadata not strings",
       "{" + ok_entry + R"(, "__metadata__": {"step": 3}})",
       16,
       {},
       "__metadata__ value 'step' is a JSON number (3); metadata values must be strings"},
      {"metadata not an object",
       "{" + ok_entry + R"(, "__metadata__": [1]})",
       16,
       {},
       "__metadata__ is a JSON array, expected an object"},
  };
  TempDir dir;
  std::set<std::string> messages;
  for (const CorruptCase& c : cases) {
    const auto path = dir.path() / "corrupt.safetensors";
    write_raw(path, c.header, c.data_bytes, c.length);
    const std::string message = open_error(path);
    EXPECT_THAT(message, HasSubstr(c.message)) << c.what;
    EXPECT_THAT(message, HasSubstr(path.string())) << c.what;
    EXPECT_EQ(message.find('\n'), std::string::npos) << c.what;
    messages.insert(message);
  }
  EXPECT_EQ(messages.size(), cases.size()) << "two cases share one message";
}

TEST(SafetensorsReader, ShortMissingAndNonRegularFiles) {
  TempDir dir;
  const auto short_path = dir.path() / "short.safetensors";
  std::ofstream(short_path) << "12345";
  EXPECT_THAT(open_error(short_path), HasSubstr("is 5 bytes, shorter than the 8-byte header"));
  const auto empty_path = dir.path() / "empty.safetensors";
  std::ofstream(empty_path).flush();
  EXPECT_THAT(open_error(empty_path), HasSubstr("is 0 bytes, shorter than the 8-byte header"));
  EXPECT_THAT(open_error(dir.path() / "absent.safetensors"),
              HasSubstr("cannot open: No such file or directory"));
  EXPECT_THAT(open_error(dir.path()), HasSubstr("is not a regular file"));
  // A FIFO of the name is refused at once (opening it used to wait for a writer forever).
  const auto fifo_path = dir.path() / "fifo.safetensors";
  ASSERT_EQ(::mkfifo(fifo_path.c_str(), 0644), 0);
  EXPECT_THAT(open_error(fifo_path), HasSubstr("is not a regular file"));
}

// Nesting past kMaxJsonDepth, in the header and in its metadata, is one clear error, not a
// stack overflow (a 100000-deep value used to crash the reader and its error path).
TEST(SafetensorsReader, DeeplyNestedHeaderIsRejected) {
  TempDir dir;
  const auto path = dir.path() / "deep.safetensors";
  const std::string deep = std::string(100000, '[') + std::string(100000, ']');
  write_raw(path, R"({"a": )" + deep + "}", 0);
  EXPECT_THAT(open_error(path), HasSubstr("header is nested deeper than 64 levels"));
  write_raw(path, R"({"__metadata__": {"x": )" + deep + "}}", 0);
  EXPECT_THAT(open_error(path), HasSubstr("header is nested deeper than 64 levels"));
}

// The header's parse is linear in its entries: 100000 zero-size tensors (over 120 s when the
// duplicate check made the parse quadratic) open well within the test's time limit.
TEST(SafetensorsReader, ManyEntriesParseInLinearTime) {
  TempDir dir;
  const auto path = dir.path() / "many.safetensors";
  std::string header = "{";
  for (int i = 0; i < 100000; ++i) {
    if (i > 0) header += ',';
    header += "\"t";
    header += std::to_string(i);
    header += R"(": {"dtype": "F32", "shape": [0], "data_offsets": [0, 0]})";
  }
  header += "}";
  write_raw(path, header, 0);
  const SafetensorsFile file(path);
  EXPECT_EQ(file.tensors().size(), 100000u);
}

// A header length above the format's 100 MB limit, in a file big enough to hold it (sparse, so
// the test writes 16 bytes).
TEST(SafetensorsReader, AbsurdHeaderLengthIsRejected) {
  TempDir dir;
  const auto path = dir.path() / "huge.safetensors";
  write_raw(path, "{}", 0, 100'000'001);
  std::filesystem::resize_file(path, 100'000'016);
  EXPECT_THAT(open_error(path), HasSubstr("header length 100000001 exceeds the format's limit"));
}

TEST(SafetensorsReader, RequestsThatDoNotMatchTheFile) {
  TempDir dir;
  const auto path = dir.path() / "w.safetensors";
  const std::vector<float> values(6, 1.0f);
  const std::vector<int32_t> ints = {1, 2};
  const std::vector<int64_t> wide = {1, int64_t{1} << 40};
  const std::vector<TensorToWrite> tensors = {
      tensor_to_write<float>("model.layers.0.mlp.up_proj.weight", StDType::kF32, {2, 3}, values),
      tensor_to_write<int32_t>("ids", StDType::kI32, {2}, ints),
      tensor_to_write<int64_t>("wide", StDType::kI64, {2}, wide)};
  write_safetensors(path, tensors);
  const SafetensorsFile file(path);
  EXPECT_EQ(file.find("nope"), nullptr);
  EXPECT_THAT(error_of([&] { file.info("model.layers.0.mlp.down_proj.weight"); }),
              HasSubstr("has no tensor 'model.layers.0.mlp.down_proj.weight'; it holds 3 tensors, "
                        "e.g. 'model.layers.0.mlp.up_proj.weight'"));
  EXPECT_THAT(error_of([&] {
                file.read_f32("model.layers.0.mlp.up_proj.weight", {3, 2});
              }),
              HasSubstr("tensor 'model.layers.0.mlp.up_proj.weight' has shape [2, 3], expected "
                        "[3, 2]"));
  EXPECT_THAT(error_of([&] { file.expect("ids", StDType::kI64, {2}); }),
              HasSubstr("tensor 'ids' is I32, expected I64"));
  EXPECT_THAT(error_of([&] { file.read_f32("ids", {2}); }),
              HasSubstr("tensor 'ids' is I32; only F32, BF16 and F16 tensors read as f32"));
  EXPECT_THAT(error_of([&] {
                file.read_i32("model.layers.0.mlp.up_proj.weight", {2, 3});
              }),
              HasSubstr("is F32; only integer tensors read as int32"));
  EXPECT_THAT(error_of([&] { file.read_i32("wide", {2}); }),
              HasSubstr("tensor 'wide' (I64) element 1 is 1099511627776, outside int32"));
}

// Two shards and an index, as Hugging Face writes them.
class ShardedCheckpoint : public testing::Test {
 protected:
  void SetUp() override {
    const TensorToWrite first[] = {tensor_to_write<float>("a", StDType::kF32, {2}, a_),
                                   tensor_to_write<float>("b", StDType::kF32, {1}, b_)};
    const TensorToWrite second[] = {tensor_to_write<float>("c", StDType::kF32, {3}, c_)};
    write_safetensors(dir_.path() / "model-00001-of-00002.safetensors", first);
    write_safetensors(dir_.path() / "model-00002-of-00002.safetensors", second);
  }
  void write_index(const std::string& text) {
    std::ofstream(dir_.path() / SafetensorsCheckpoint::kIndexName) << text;
  }
  std::string open_error() {
    return error_of([&] { SafetensorsCheckpoint checkpoint(dir_.path()); });
  }

  TempDir dir_;
  std::vector<float> a_ = {1, 2};
  std::vector<float> b_ = {3};
  std::vector<float> c_ = {4, 5, 6};
};

TEST_F(ShardedCheckpoint, OpensShardsLazily) {
  write_index(R"({"metadata": {"total_size": 24}, "weight_map": {
      "a": "model-00001-of-00002.safetensors", "b": "model-00001-of-00002.safetensors",
      "c": "model-00002-of-00002.safetensors"}})");
  const SafetensorsCheckpoint checkpoint(dir_.path());
  EXPECT_EQ(checkpoint.tensor_names(), (std::vector<std::string>{"a", "b", "c"}));
  EXPECT_EQ(checkpoint.num_shards(), 2u);
  EXPECT_EQ(checkpoint.num_open_shards(), 0u);
  EXPECT_EQ(checkpoint.read_f32("c", {3}), c_);
  EXPECT_EQ(checkpoint.num_open_shards(), 1u);
  EXPECT_EQ(checkpoint.read_f32("a", {2}), a_);
  EXPECT_EQ(checkpoint.read_f32("b", {1}), b_);
  EXPECT_EQ(checkpoint.num_open_shards(), 2u);
  EXPECT_EQ(checkpoint.info("a").shape, (std::vector<int64_t>{2}));
  EXPECT_THAT(error_of([&] { checkpoint.file_for("d"); }),
              HasSubstr("has no tensor 'd'; it holds 3 tensors"));
  // The index file itself opens the same checkpoint.
  const SafetensorsCheckpoint by_index(dir_.path() / SafetensorsCheckpoint::kIndexName);
  EXPECT_EQ(by_index.read_f32("b", {1}), b_);
}

TEST_F(ShardedCheckpoint, TensorListedButAbsentFromItsShard) {
  write_index(R"({"weight_map": {"a": "model-00001-of-00002.safetensors",
                                  "c": "model-00001-of-00002.safetensors"}})");
  const SafetensorsCheckpoint checkpoint(dir_.path());
  EXPECT_EQ(checkpoint.read_f32("a", {2}), a_);
  EXPECT_THAT(error_of([&] { checkpoint.read_f32("c", {3}); }),
              HasSubstr("maps tensor 'c' to shard 'model-00001-of-00002.safetensors', but that "
                        "shard has no such tensor"));
  EXPECT_THAT(error_of([&] { checkpoint.verify(); }), HasSubstr("maps tensor 'c'"));
}

TEST_F(ShardedCheckpoint, MissingShardFile) {
  write_index(R"({"weight_map": {"a": "model-00003-of-00003.safetensors"}})");
  const SafetensorsCheckpoint checkpoint(dir_.path());
  EXPECT_THAT(error_of([&] { checkpoint.verify(); }),
              HasSubstr("model-00003-of-00003.safetensors': cannot open"));
}

TEST_F(ShardedCheckpoint, BadIndexFiles) {
  write_index("{\"weight_map\": ");
  EXPECT_THAT(open_error(), HasSubstr("model.safetensors.index.json': not valid JSON"));
  write_index(R"({"metadata": {}})");
  EXPECT_THAT(open_error(), HasSubstr("expected an object with a \"weight_map\" object"));
  write_index(R"({"weight_map": {"a": 1}})");
  EXPECT_THAT(open_error(), HasSubstr("weight_map['a'] is a JSON number"));
  write_index(R"({"weight_map": {"a": "../model-00001-of-00002.safetensors"}})");
  EXPECT_THAT(open_error(), HasSubstr("shard names must be plain file names"));
  write_index(R"({"weight_map": {}})");
  EXPECT_THAT(open_error(), HasSubstr("weight_map is empty"));
}

TEST(Checkpoint, SingleFileAndDirectoryForms) {
  TempDir dir;
  const std::vector<float> w = {1, 2, 3, 4};
  const TensorToWrite tensor = tensor_to_write<float>("w", StDType::kF32, {2, 2}, w);
  EXPECT_THAT(error_of([&] { SafetensorsCheckpoint checkpoint(dir.path()); }),
              HasSubstr("has neither model.safetensors.index.json nor model.safetensors"));
  EXPECT_THAT(error_of([&] { SafetensorsCheckpoint checkpoint(dir.path() / "nothing"); }),
              HasSubstr("does not exist"));
  write_safetensors(dir.path() / "model.safetensors", std::span(&tensor, 1));
  const SafetensorsCheckpoint by_dir(dir.path());
  EXPECT_EQ(by_dir.num_shards(), 1u);
  EXPECT_EQ(by_dir.read_f32("w", {2, 2}), w);
  const SafetensorsCheckpoint by_file(dir.path() / "model.safetensors");
  EXPECT_EQ(by_file.tensor_names(), std::vector<std::string>{"w"});
  by_file.verify();
}

}  // namespace
}  // namespace maxctx::io

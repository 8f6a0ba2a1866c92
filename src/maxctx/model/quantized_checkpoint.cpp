#include "maxctx/model/quantized_checkpoint.h"

#include <cstring>
#include <string>

#include "maxctx/core/check.h"
#include "maxctx/io/safetensors.h"

namespace maxctx::model {
namespace {

namespace fs = std::filesystem;

std::vector<int64_t> spec_shape(const WeightSpec& s) {
  return s.cols == 1 ? std::vector<int64_t>{s.rows} : std::vector<int64_t>{s.rows, s.cols};
}

// Whole tensors, or none of another expert rank's expert (inference's experts split over ranks).
void check_whole(const WeightSpec& s) {
  const bool other_expert = s.expert_weight() && s.numel() == 0;
  MAXCTX_CHECK(other_expert || (s.rows == s.global_rows && s.cols == s.global_cols),
               "a quantized checkpoint holds whole tensors (tensor size 1), not {}'s shard",
               s.name);
}

// The codes and scales every int8 projection of `specs` needs, in all.
std::pair<int64_t, int64_t> int8_counts(const std::vector<WeightSpec>& specs) {
  int64_t codes = 0, scales = 0;
  for (const WeightSpec& s : specs) {
    check_whole(s);
    if (!int8_quantized(s)) continue;
    codes += s.numel();
    scales += s.rows;
  }
  return {codes, scales};
}

bool marked_int8(const io::SafetensorsCheckpoint& checkpoint) {
  const std::vector<std::string> names = checkpoint.tensor_names();
  if (names.empty()) return false;
  const auto& metadata = checkpoint.file_for(names.front()).metadata();
  const auto mark = metadata.find(kQuantizationMetadataKey);
  return mark != metadata.end() && mark->second == "int8";
}

}  // namespace

bool is_int8_checkpoint(const fs::path& dir) { return marked_int8(io::SafetensorsCheckpoint(dir)); }

bool int8_quantized(const WeightSpec& spec) {
  using parallel::WeightRole;
  return spec.role == WeightRole::kHeadsOrHidden || spec.role == WeightRole::kIntoResidual ||
         spec.role == WeightRole::kOutputHead;
}

void write_int8_checkpoint(const kernels::Kernels& k, const std::vector<WeightSpec>& specs,
                           const float* flat, const fs::path& dir) {
  // Codes and scales live until the write: one buffer each, filled in spec order.
  const auto [code_count, scale_count] = int8_counts(specs);
  std::vector<int8_t> codes(static_cast<size_t>(code_count));
  std::vector<float> scales(static_cast<size_t>(scale_count));
  std::vector<io::TensorToWrite> tensors;
  int64_t next_code = 0, next_scale = 0;
  for (const WeightSpec& s : specs) {
    const std::span<const float> values(flat + s.offset, static_cast<size_t>(s.numel()));
    if (!int8_quantized(s)) {
      tensors.push_back(io::tensor_to_write(s.name, io::StDType::kF32, spec_shape(s), values));
      continue;
    }
    int8_t* c = codes.data() + next_code;
    float* scale = scales.data() + next_scale;
    // The rule int8_pack_weights applies on load (levels 127, one scale per output row).
    k.quantize_rows_int8(
        TensorView(c, DType::kI8, Shape{s.rows, s.cols}),
        TensorView(scale, DType::kF32, Shape{s.rows}),
        TensorView(const_cast<float*>(values.data()), DType::kF32, Shape{s.rows, s.cols}),
        kernels::kInt8Levels);
    tensors.push_back(
        io::tensor_to_write(s.name, io::StDType::kI8, {s.rows, s.cols},
                            std::span<const int8_t>(c, static_cast<size_t>(s.numel()))));
    tensors.push_back(io::tensor_to_write(s.name + "_scale", io::StDType::kF32, {s.rows},
                                          std::span<const float>(scale, s.rows)));
    next_code += s.numel();
    next_scale += s.rows;
  }
  fs::create_directories(dir);
  io::write_safetensors(dir / "model.safetensors", tensors,
                        {{"format", "pt"}, {kQuantizationMetadataKey, "int8"}});
}

Int8Parameters read_int8_checkpoint(const kernels::Kernels& k, const std::vector<WeightSpec>& specs,
                                    TensorView flat, const fs::path& dir) {
  MAXCTX_CHECK_EQ(flat.numel(), total_numel(specs), "a flat weight buffer for these specs");
  const io::SafetensorsCheckpoint checkpoint(dir);
  const auto [code_count, scale_count] = int8_counts(specs);
  if (code_count == 0) fail("{}: the model has no projections to read as int8", dir.string());
  if (!marked_int8(checkpoint)) {
    fail(
        "checkpoint_is_quantized=true but {} is not a quantized checkpoint (its safetensors "
        "metadata has no \"{}\": \"int8\"); write one with `maxctx export ... quantization=int8`, "
        "or load this one with checkpoint_is_quantized=false",
        dir.string(), kQuantizationMetadataKey);
  }
  Int8Parameters p;
  p.codes = k.empty({code_count}, DType::kI8);
  p.scales = k.empty({scale_count});
  int64_t next_code = 0, next_scale = 0;
  for (const WeightSpec& s : specs) {
    if (s.numel() == 0) continue;  // another expert rank's expert: not read from disk
    const TensorView region = flat.elements(s.offset, s.numel());
    if (!int8_quantized(s)) {
      // Read on the host, then one copy into the backend's memory.
      const Tensor host(s.cols == 1 ? Shape{s.rows} : Shape{s.rows, s.cols}, region.dtype());
      checkpoint.read_into(s.name, host.view());
      k.copy_from_host(region.raw(), host.view().raw(), region.bytes());
      continue;
    }
    k.fill_zero(region);
    const io::SafetensorsFile& file = checkpoint.file_for(s.name);
    const std::span<const std::byte> code_bytes =
        file.bytes(file.expect(s.name, io::StDType::kI8, {s.rows, s.cols}));
    const TensorView codes =
        p.codes.view().elements(next_code, s.numel()).reshaped({s.rows, s.cols});
    k.copy_from_host(codes.raw(), code_bytes.data(), code_bytes.size());
    const std::string scale_name = s.name + "_scale";
    const TensorView scale = p.scales.view().elements(next_scale, s.rows);
    checkpoint.file_for(scale_name).expect(scale_name, io::StDType::kF32, {s.rows});
    const Tensor host_scale({s.rows});
    checkpoint.read_f32_into(scale_name, host_scale.view());
    k.copy_from_host(scale.raw(), host_scale.view().raw(), scale.bytes());
    p.matrices.push_back({region.reshaped({s.rows, s.cols}), codes, scale});
    next_code += s.numel();
    next_scale += s.rows;
  }
  return p;
}

}  // namespace maxctx::model

#include "maxctx/model/quantized_checkpoint.h"

#include <algorithm>
#include <cstring>
#include <string>

#include "maxctx/core/check.h"
#include "maxctx/io/safetensors.h"
#include "maxctx/io/sliced_tensors.h"

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

// Whole rows: a quantized checkpoint is read by whole tensors or blocks of rows (inference's
// vocabulary split over context_autoregressive), never a tensor-parallel column block.
void check_whole_rows(const WeightSpec& s) {
  MAXCTX_CHECK(s.numel() == 0 || (s.col_offset == 0 && s.cols == s.global_cols),
               "a quantized checkpoint is read by blocks of whole rows, not {}'s column block",
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
                           const float* flat, const fs::path& dir, const GivenInt8& given) {
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
    if (const auto it = given.find(s.name); it != given.end()) {
      MAXCTX_CHECK(static_cast<int64_t>(it->second.codes.size()) == s.numel() &&
                       static_cast<int64_t>(it->second.scales.size()) == s.rows,
                   "{}'s given int8 codes and scales are not ({}, {})", s.name, s.rows, s.cols);
      std::copy(it->second.codes.begin(), it->second.codes.end(), c);
      std::copy(it->second.scales.begin(), it->second.scales.end(), scale);
    } else {
      // The rule int8_pack_weights applies on load (levels 127, one scale per output row).
      k.quantize_rows_int8(
          TensorView(c, DType::kI8, Shape{s.rows, s.cols}),
          TensorView(scale, DType::kF32, Shape{s.rows}),
          TensorView(const_cast<float*>(values.data()), DType::kF32, Shape{s.rows, s.cols}),
          kernels::kInt8Levels);
    }
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

Int8Layout int8_layout(const std::vector<WeightSpec>& specs) {
  Int8Layout layout;
  int64_t floats = 0;
  for (const WeightSpec& s : specs) {
    WeightSpec placed = s;
    if (int8_quantized(s)) {
      placed.offset = layout.codes;
      layout.codes += s.numel();
      layout.scales += s.rows;
      layout.int8_specs.push_back(placed);
    } else {
      placed.offset = floats;
      floats += s.numel();
      layout.float_specs.push_back(placed);
    }
  }
  return layout;
}

namespace {

// The parameters' buffers for `layout`, and the matrices in spec order as `place` fills them.
Int8Parameters allocate_int8(const kernels::Kernels& k, const Int8Layout& layout) {
  Int8Parameters p;
  p.codes = k.empty({layout.codes}, DType::kI8);
  p.scales = k.empty({layout.scales});
  int64_t next_scale = 0;
  for (const WeightSpec& s : layout.int8_specs) {
    if (s.numel() == 0) continue;  // another expert rank's expert
    const TensorView codes =
        p.codes.view().elements(s.offset, s.numel()).reshaped({s.rows, s.cols});
    p.matrices.push_back({codes, codes, p.scales.view().elements(next_scale, s.rows)});
    next_scale += s.rows;
  }
  return p;
}

}  // namespace

Int8Parameters quantize_projections(const kernels::Kernels& k, const Int8Layout& layout,
                                    DType dtype, const FillWeight& fill) {
  Int8Parameters p = allocate_int8(k, layout);
  int64_t largest = 0;
  for (const WeightSpec& s : layout.int8_specs) largest = std::max(largest, s.numel());
  const Tensor staging = k.empty({std::max<int64_t>(largest, 1)}, dtype);
  size_t next = 0;
  for (const WeightSpec& s : layout.int8_specs) {
    if (s.numel() == 0) continue;
    const TensorView weight = staging.view().elements(0, s.numel()).reshaped({s.rows, s.cols});
    fill(s, weight);
    const QuantizedMatrix& m = p.matrices[next++];
    k.quantize_rows_int8(m.codes, m.scale, weight, kernels::kInt8Levels);
  }
  return p;
}

Int8Parameters read_int8_checkpoint(const kernels::Kernels& k, const Int8Layout& layout,
                                    TensorView flat, const fs::path& dir) {
  MAXCTX_CHECK_EQ(flat.numel(), total_numel(layout.float_specs),
                  "a flat weight buffer for these specs");
  for (const std::vector<WeightSpec>* list : {&layout.float_specs, &layout.int8_specs}) {
    for (const WeightSpec& s : *list) check_whole_rows(s);
  }
  const io::SafetensorsCheckpoint checkpoint(dir);
  if (layout.codes == 0) fail("{}: the model has no projections to read as int8", dir.string());
  if (!marked_int8(checkpoint)) {
    fail(
        "checkpoint_is_quantized=true but {} is not a quantized checkpoint (its safetensors "
        "metadata has no \"{}\": \"int8\"); write one with `maxctx export ... quantization=int8`, "
        "or load this one with checkpoint_is_quantized=false",
        dir.string(), kQuantizationMetadataKey);
  }
  // The float tensors by this rank's rows only (io::SliceReader reads no other bytes).
  const io::SliceReader tensors(io::open_tensor_index(dir), dir.string());
  for (const WeightSpec& s : layout.float_specs) {
    if (s.numel() == 0) continue;
    const TensorView region = flat.elements(s.offset, s.numel());
    // Read on the host, then one copy into the backend's memory.
    const Tensor host({s.numel()}, region.dtype());
    tensors.read(s.name, io::Rect{s.row_offset, 0, s.rows, s.cols}, host.view());
    k.copy_from_host(region.raw(), host.view().raw(), region.bytes());
  }
  Int8Parameters p = allocate_int8(k, layout);
  size_t next = 0;
  for (const WeightSpec& s : layout.int8_specs) {
    if (s.numel() == 0) continue;  // another expert rank's expert: not read from disk
    const QuantizedMatrix& m = p.matrices[next++];
    const io::SafetensorsFile& file = checkpoint.file_for(s.name);
    // This rank's rows of the codes (bytes of a memory-mapped file: no others are read).
    const std::span<const std::byte> code_bytes =
        file.bytes(file.expect(s.name, io::StDType::kI8, {s.global_rows, s.cols}))
            .subspan(static_cast<size_t>(s.row_offset * s.cols), static_cast<size_t>(s.numel()));
    k.copy_from_host(m.codes.raw(), code_bytes.data(), code_bytes.size());
    const std::string scale_name = s.name + "_scale";
    checkpoint.file_for(scale_name).expect(scale_name, io::StDType::kF32, {s.global_rows});
    const Tensor host_scale({s.global_rows});
    checkpoint.read_f32_into(scale_name, host_scale.view());
    k.copy_from_host(m.scale.raw(), host_scale.view().elements(s.row_offset, s.rows).raw(),
                     m.scale.bytes());
  }
  return p;
}

}  // namespace maxctx::model

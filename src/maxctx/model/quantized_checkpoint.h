// Checkpoints saved already quantized (MaxText's checkpoint_is_quantized): every projection
// that quantization=int8 quantizes (q, k, v, o, the MLP's or each expert's w1/w3/w2, lm_head) is
// stored as its int8 codes and per-output-row scales, everything else (the embedding, the norms,
// a mixture of experts' router) as F32, all under the Hugging Face names:
//   <name>        I8  (out, in)  the codes, ref::quantize_rows_int8 with levels 127
//   <name>_scale  F32 (out)      w ≈ codes · scale per row
// model.safetensors carries the metadata {"quantization": "int8"}; config.json is the plain
// one (export writes it), so the dimensions load as for any checkpoint. Loading it packs the codes
// as they are (kernels.int8_pack_codes), so the model decodes bit-identically to quantizing the
// original weights on load, and the file is about a quarter of the F32 one when the projections
// are nearly all the weights (Mixtral 8x7B; mixtral-tiny's, with its F32 embedding, is 0.33).
#pragma once

#include <filesystem>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "maxctx/core/tensor.h"
#include "maxctx/kernels/kernels.h"
#include "maxctx/model/inference.h"
#include "maxctx/model/weights.h"

namespace maxctx::model {

inline constexpr const char* kQuantizationMetadataKey = "quantization";

// Whether `dir` holds a checkpoint written by write_int8_checkpoint (its metadata says so).
bool is_int8_checkpoint(const std::filesystem::path& dir);

// Whether quantization=int8 stores `spec` as int8 codes.
bool int8_quantized(const WeightSpec& spec);

// A projection's int8 form given as it is (a GGUF Q8_0 tensor whose rows have one scale each:
// model/gguf_import.h): codes (rows, cols) and one scale per row.
struct Int8Codes {
  std::vector<int8_t> codes;
  std::vector<float> scales;
};
using GivenInt8 = std::map<std::string, Int8Codes>;

// Writes `dir`/model.safetensors from the F32 parameters `flat` (llama_weight_specs layout,
// tensor size 1): the projections quantized, the rest F32; a projection named in `given` is
// written with those codes and scales instead.
void write_int8_checkpoint(const kernels::Kernels& kernels, const std::vector<WeightSpec>& specs,
                           const float* flat, const std::filesystem::path& dir,
                           const GivenInt8& given = {});

// The weights of `specs` as a rank holds them with quantization=int8, with no float copy of a
// projection: the tensors that stay in weight_dtype (the embedding, the norms, a mixture's
// router) in one flat buffer, the projections as int8 codes in another, each renumbered from 0
// in the specs' order. Another expert rank's experts stay empty specs in int8_specs.
struct Int8Layout {
  std::vector<WeightSpec> float_specs;  // offsets into the float buffer (weight_dtype)
  std::vector<WeightSpec> int8_specs;   // offsets into Int8Parameters::codes
  int64_t codes = 0;                    // int8_specs' elements
  int64_t scales = 0;                   // one per row of every projection
};
Int8Layout int8_layout(const std::vector<WeightSpec>& specs);

// The int8 projections: the codes and scales (owned here) and, per projection, the codes as the
// region that stands for it (LlamaWeights bound by bind_weights(float_specs, flat, int8_specs,
// codes) view its codes, so InferenceWeights finds each projection's by address).
struct Int8Parameters {
  Tensor codes;   // (Int8Layout::codes) every projection's codes, one after another
  Tensor scales;  // (Int8Layout::scales) every projection's scales
  std::vector<QuantizedMatrix> matrices;
  bool empty() const { return matrices.empty(); }
};

// Writes one spec's block (its local shape) into `out`, a buffer of the weights' dtype in the
// backend's memory.
using FillWeight = std::function<void(const WeightSpec& spec, TensorView out)>;

// Every projection of `layout` read by `fill` into one reused buffer of `dtype`, quantized into
// its codes and scales (the rule int8_pack_weights applies: the same codes, bit for bit) and
// dropped: at no moment is more than one projection held in float.
Int8Parameters quantize_projections(const kernels::Kernels& kernels, const Int8Layout& layout,
                                    DType dtype, const FillWeight& fill);

// Reads the checkpoint in `dir` written by write_int8_checkpoint: `flat` receives layout's
// float tensors (in its dtype), the returned parameters the codes and scales. A tensor missing,
// or of another dtype or shape than the model needs, is an error naming it; so is a checkpoint
// without the quantization metadata.
Int8Parameters read_int8_checkpoint(const kernels::Kernels& kernels, const Int8Layout& layout,
                                    TensorView flat, const std::filesystem::path& dir);

}  // namespace maxctx::model

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

// Writes `dir`/model.safetensors from the F32 parameters `flat` (llama_weight_specs layout,
// tensor size 1): the projections quantized, the rest F32.
void write_int8_checkpoint(const kernels::Kernels& kernels, const std::vector<WeightSpec>& specs,
                           const float* flat, const std::filesystem::path& dir);

// The int8 projections of a loaded quantized checkpoint: the codes and scales (owned here) and,
// per projection, where they stand in the weight buffer.
struct Int8Parameters {
  Tensor codes;   // every projection's codes, one after another
  Tensor scales;  // every projection's scales
  std::vector<QuantizedMatrix> matrices;
  bool empty() const { return matrices.empty(); }
};

// Reads the checkpoint in `dir` written by write_int8_checkpoint into `flat` (the
// non-quantized tensors, in its dtype; the projections' regions are zeroed) and returns the
// codes and scales. A tensor missing, or of another dtype or shape than the model needs, is an
// error naming it; so is a checkpoint without the quantization metadata.
Int8Parameters read_int8_checkpoint(const kernels::Kernels& kernels,
                                    const std::vector<WeightSpec>& specs, TensorView flat,
                                    const std::filesystem::path& dir);

}  // namespace maxctx::model

// GGUF files in (llama.cpp's format): a Llama-architecture GGUF becomes a Hugging Face
// directory that the rest of maxctx loads like any other (config.json, model.safetensors in F32,
// and tokenizer.json from the embedded tokenizer when it is byte-level BPE).
//
// The mapping is llama.cpp's converter (convert_hf_to_gguf.py) run backwards: llama.* metadata
// to LlamaConfig fields, blk.N.* tensor names to Hugging Face ones, and the Q/K rows of each
// head put back from llama.cpp's interleaved RoPE order (row 2i + j of a head is row
// j·head_dim/2 + i of the Hugging Face head). Quantized tensors (Q8_0, Q4_0, Q4_1) are
// dequantized to f32 exactly as ggml does; F16/BF16 widen exactly. For quantization=int8 the
// directory can instead be a quantized checkpoint keeping Q8_0 codes where a row has one scale
// (write_int8_directory_from_gguf). Mixtral-style experts
// (llama.expert_count, llama.expert_used_count; ffn_{gate,up,down}_exps stacking every expert, or
// the older ffn_{gate,up,down}.<j> per expert, and the router ffn_gate_inp) become a
// MixtralConfig directory. Llama 3 RoPE scaling, which the converter writes as the tensor
// rope_freqs.weight (a divisor per frequency), becomes rope_type llama3 with the parameters that
// reproduce every divisor (see rope_from_freqs). Refused by name: other architectures, other RoPE
// scaling (llama.rope.scaling.type linear, yarn, ...; per-frequency divisors of another form),
// partial RoPE, shared experts, other tokenizer models.
#pragma once

#include <filesystem>
#include <optional>
#include <span>
#include <string>

#include "maxctx/io/gguf.h"
#include "maxctx/kernels/kernels.h"
#include "maxctx/model/llama_config.h"
#include "maxctx/model/quantized_checkpoint.h"

namespace maxctx::model {

LlamaConfig llama_config_from_gguf(const io::GgufFile& file);

// Writes `out_dir`/config.json, model.safetensors and (byte-level BPE tokenizers)
// tokenizer.json + tokenizer_config.json. Returns a one-line description (types, tensors).
std::string write_hf_directory_from_gguf(const io::GgufFile& file,
                                         const std::filesystem::path& out_dir);

// The same directory with model.safetensors a quantized checkpoint (quantized_checkpoint.h:
// what quantization=int8 loads with checkpoint_is_quantized=true). A Q8_0 projection whose rows
// q8_0_as_int8_rows takes is written with the file's codes and scales as they are; every other
// projection is dequantized and quantized per row by maxctx's rule, exactly as loading the F32
// directory with quantization=int8 would. Returns a one-line description saying how many of each.
std::string write_int8_directory_from_gguf(const kernels::Kernels& kernels,
                                           const io::GgufFile& file,
                                           const std::filesystem::path& out_dir);

// A Q8_0 matrix (rows, cols; 32-element blocks of codes, each with its f16 scale widened) as
// maxctx's int8 (one scale per row, codes within ±127) when that form holds exactly the same
// values: in every row, the blocks holding a non-zero value share one positive scale and no code
// is -128. A block of zeros (or of scale 0) fits any row and is written as codes 0; a row of
// zeros gets scale 0, as the int8 rule gives it. Where a row's block scales differ (ggml's own
// quantizer: amax/127 per block) there is no such form: nullopt. When, in addition, every row
// reaches code ±127, these are also the codes and scales the rule gives the dequantized values
// (scale = 127·d / 127 = d), so the checkpoint equals the dequantize-then-quantize one.
std::optional<Int8Codes> q8_0_as_int8_rows(std::span<const int8_t> codes,
                                           std::span<const float> scales, int64_t rows,
                                           int64_t cols);

}  // namespace maxctx::model

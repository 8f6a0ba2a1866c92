// GGUF files in (llama.cpp's format): a Llama-architecture GGUF becomes a Hugging Face
// directory that the rest of maxctx loads like any other (config.json, model.safetensors in F32,
// and tokenizer.json from the embedded tokenizer when it is byte-level BPE).
//
// The mapping is llama.cpp's converter (convert_hf_to_gguf.py) run backwards: llama.* metadata
// to LlamaConfig fields, blk.N.* tensor names to Hugging Face ones, and the Q/K rows of each
// head put back from llama.cpp's interleaved RoPE order (row 2i + j of a head is row
// j·head_dim/2 + i of the Hugging Face head). Quantized tensors (Q8_0, Q4_0, Q4_1) are
// dequantized to f32 exactly as ggml does; F16/BF16 widen exactly. Mixtral-style experts
// (llama.expert_count, llama.expert_used_count; ffn_{gate,up,down}_exps stacking every expert, or
// the older ffn_{gate,up,down}.<j> per expert, and the router ffn_gate_inp) become a
// MixtralConfig directory. Llama 3 RoPE scaling, which the converter writes as the tensor
// rope_freqs.weight (a divisor per frequency), becomes rope_type llama3 with the parameters that
// reproduce every divisor (see rope_from_freqs). Refused by name: other architectures, other RoPE
// scaling (llama.rope.scaling.type linear, yarn, ...; per-frequency divisors of another form),
// partial RoPE, shared experts, other tokenizer models.
#pragma once

#include <filesystem>
#include <string>

#include "maxctx/io/gguf.h"
#include "maxctx/model/llama_config.h"

namespace maxctx::model {

LlamaConfig llama_config_from_gguf(const io::GgufFile& file);

// Writes `out_dir`/config.json, model.safetensors and (byte-level BPE tokenizers)
// tokenizer.json + tokenizer_config.json. Returns a one-line description (types, tensors).
std::string write_hf_directory_from_gguf(const io::GgufFile& file,
                                         const std::filesystem::path& out_dir);

}  // namespace maxctx::model

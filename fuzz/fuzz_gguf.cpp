// libFuzzer harness: a GGUF file (llama.cpp's format) through the reader (header, metadata,
// tensor infos, every tensor dequantized) and the Llama import: the model from the metadata
// (experts, RoPE scaling from rope_freqs), each tensor mapped, Q/K rows put back, the embedded
// tokenizer as tokenizer.json, the Hugging Face directory written beside the input.
#include "fuzz_input.h"
#include "maxctx/io/gguf.h"
#include "maxctx/model/gguf_import.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const auto path = maxctx::fuzz::write_input(data, size, "model.gguf");
  maxctx::fuzz::expect_load_or_refusal([&] {
    const maxctx::io::GgufFile file(path);
    for (const maxctx::io::GgufTensor& t : file.tensors()) (void)file.read_f32(t);
    (void)maxctx::model::write_hf_directory_from_gguf(file, path.parent_path() / "hf");
  });
  return 0;
}

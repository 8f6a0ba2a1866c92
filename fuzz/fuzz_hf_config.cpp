// libFuzzer harness: a Hugging Face config.json through the Llama importer.
#include "fuzz_input.h"
#include "maxctx/model/hf_import.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const auto path = maxctx::fuzz::write_input(data, size, "config.json");
  maxctx::fuzz::expect_load_or_refusal([&] {
    const maxctx::model::LlamaConfig config = maxctx::model::llama_config_from_hf(path);
    (void)config.num_parameters();
  });
  return 0;
}

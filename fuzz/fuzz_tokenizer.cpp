// libFuzzer harness: a tokenizer file through load_tokenizer, which chooses by content (a
// SentencePiece model proto, or a Hugging Face tokenizer.json: the corpus seeds both), then a
// round of encode and decode on a fixed text.
#include "fuzz_input.h"
#include "maxctx/tokenizer/tokenizer.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const auto path = maxctx::fuzz::write_input(data, size, "tokenizer");
  maxctx::fuzz::expect_load_or_refusal([&] {
    const auto tokenizer = maxctx::tokenizer::load_tokenizer(path.string());
    const std::vector<int32_t> ids = tokenizer->encode("Hello world, héllo 123!", true);
    (void)tokenizer->decode(ids);
  });
  return 0;
}

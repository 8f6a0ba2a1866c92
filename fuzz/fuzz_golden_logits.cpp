// libFuzzer harness: a golden-logits JSONL file (MaxText's forward_pass_logit_checker format)
// through read_golden_logits.
#include "fuzz_input.h"
#include "maxctx/io/golden_logits.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const auto path = maxctx::fuzz::write_input(data, size, "golden.jsonl");
  maxctx::fuzz::expect_load_or_refusal([&] { (void)maxctx::io::read_golden_logits(path); });
  return 0;
}

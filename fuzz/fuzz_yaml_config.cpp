// libFuzzer harness: a YAML config file through load_config (base_config chains, model presets,
// every key's parse and the validation of derived sizes), then its printed form.
#include "fuzz_input.h"
#include "maxctx/config/config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const auto path = maxctx::fuzz::write_input(data, size, "config.yml");
  maxctx::fuzz::expect_load_or_refusal([&] {
    const maxctx::Config config = maxctx::load_config(path.string(), {}, 1);
    (void)maxctx::format_config(config);
  });
  return 0;
}

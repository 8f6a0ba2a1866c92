// libFuzzer harness: a checkpoint's state.json (train/checkpoint.h: format, step, data position,
// mesh size and the resolved config) through open_checkpoint, which reads it as a resume does,
// checks every field, then reads the index beside it (absent here: a refusal). Issue #34 N4: a
// deeply nested state.json overflowed the stack.
#include "fuzz_input.h"
#include "maxctx/train/checkpoint.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const auto input = maxctx::fuzz::write_input(data, size, "state.json");
  const auto run = input.parent_path() / "run";
  const auto step_dir = run / "checkpoints" / "1";
  std::filesystem::create_directories(step_dir);
  std::filesystem::rename(input, step_dir / "state.json");
  maxctx::fuzz::expect_load_or_refusal([&] { (void)maxctx::train::open_checkpoint(run, 1); });
  return 0;
}

// libFuzzer harness: a checkpoint's index.json (io/sliced_tensors.h: every tensor's dtype, shape
// and slices with their files and byte ranges) through read_slice_index_file, which checks every
// entry and that the slices cover each tensor exactly; a valid one is printed back and re-read.
#include "fuzz_input.h"
#include "maxctx/io/sliced_tensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const auto path = maxctx::fuzz::write_input(data, size, "index.json");
  maxctx::fuzz::expect_load_or_refusal([&] {
    const maxctx::io::SliceIndex index = maxctx::io::read_slice_index_file(path);
    (void)maxctx::io::parse_slice_index(maxctx::io::slice_index_json(index), path.parent_path(),
                                        "the printed index");
  });
  return 0;
}

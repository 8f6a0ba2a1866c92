// libFuzzer harness: a whole .safetensors file (8-byte header length, JSON header, data) through
// SafetensorsFile, then every tensor's bytes and an f32 read of each F32 tensor.
#include "fuzz_input.h"
#include "maxctx/io/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const auto path = maxctx::fuzz::write_input(data, size, "model.safetensors");
  maxctx::fuzz::expect_load_or_refusal([&] {
    const maxctx::io::SafetensorsFile file(path);
    for (const maxctx::io::TensorInfo& info : file.tensors()) {
      (void)file.bytes(info.name);
      if (info.dtype == maxctx::io::StDType::kF32) (void)file.read_f32(info.name, info.shape);
    }
  });
  return 0;
}

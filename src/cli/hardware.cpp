// hardware=... (hardware.h): device selection, the no-GPU error, device collectives.
#include "cli/hardware.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "cli/common.h"
#include "maxctx/core/check.h"
#include "maxctx/core/log.h"
#include "maxctx/kernels/emulated/emulated_gpu.h"
#include "maxctx/kernels/gpu_devices.h"
#include "maxctx/mesh/device_collectives.h"

// The NCCL communicator (mesh/nccl_communicator.h) where this checkout has it; without it a
// group of ranks on distinct GPUs stages through the host too (and says so).
#if MAXCTX_HAVE_CUDA && __has_include("maxctx/mesh/nccl_communicator.h")
#include "maxctx/mesh/nccl_communicator.h"
#define MAXCTX_HAVE_NCCL_COMMUNICATOR 1
#endif

namespace maxctx::cli {
namespace {

// MAXCTX_EMULATE_GPU=1, read once.
bool emulate_gpu() {
  static const bool kEmulate = [] {
    const char* value = std::getenv("MAXCTX_EMULATE_GPU");
    return value != nullptr && std::strcmp(value, "1") == 0;
  }();
  return kEmulate;
}

int node_local_rank(const Mesh& mesh) {
  if (const char* value = std::getenv("OMPI_COMM_WORLD_LOCAL_RANK")) return std::atoi(value);
  return static_cast<int>(mesh.local_rank());
}

// One line on every rank alike when some rank has no usable GPU: every rank's problem ("" when
// none) is gathered, and the first is named.
void fail_unless_every_rank_has_a_gpu(const Communicator& world, const std::string& mine) {
  constexpr size_t kField = 200;
  std::vector<uint8_t> row(kField, 0);
  std::copy_n(mine.begin(), std::min(mine.size(), kField - 1), row.begin());
  std::vector<uint8_t> all(kField * static_cast<size_t>(world.size()));
  world.all_gather<uint8_t>(row, all);
  int failing = 0;
  std::string first;
  for (int r = 0; r < world.size(); ++r) {
    const char* text = reinterpret_cast<const char*>(all.data() + kField * r);
    if (text[0] == '\0') continue;
    if (failing++ == 0) first = fmt::format("rank {} {}", r, text);
  }
  if (failing > 0) {
    fail(
        "hardware=gpu: {} of {} ranks find no GPU ({}); every rank needs one (or use "
        "hardware=cpu)",
        failing, world.size(), first);
  }
}

// What the GPU path does not run yet, refused before any work.
void check_gpu_supports(const Config& config) {
  if (config.decoder_block == "mixtral") {
    fail(
        "decoder_block=mixtral: the MoE block routes tokens on the host, not on hardware={} "
        "yet; use hardware=cpu",
        config.hardware);
  }
}

}  // namespace

bool uses_gpu(const Config& config) {
  const HardwareKind kind = hardware_kind(config);
  return kind == HardwareKind::kGpu || kind == HardwareKind::kGpuMultiprocess;
}

Mesh mesh_for(const Config& config) {
  Mesh mesh(mesh_spec_from(config));
  if (!uses_gpu(config)) return mesh;
  check_gpu_supports(config);
  if (emulate_gpu()) {
    log::info(
        "hardware=gpu: the emulated GPU (MAXCTX_EMULATE_GPU=1, a test switch): cpu "
        "kernels behind device memory the host cannot touch");
    set_up_device_collectives(mesh, {mesh.hostname(), kEmulatedBusId},
                              kernels::emulated::emulated_gpu_kernels().allocator(), nullptr);
    return mesh;
  }
  if (!kernels::has_cuda_backend()) {
    fail(
        "hardware={}: this build has no cuda backend (configured with MAXCTX_CUDA=OFF); use "
        "hardware=cpu, or build where the CUDA toolkit is",
        config.hardware);
  }
  const kernels::GpuDevices devices = kernels::visible_gpus();
  std::string problem;
  int device = -1;
  if (devices.count() == 0) {
    problem = fmt::format("on {} sees no CUDA device: {}", mesh.hostname(), devices.error);
  } else {
    device = node_local_rank(mesh) % devices.count();
    const std::string error = kernels::select_gpu(device);
    if (!error.empty()) {
      problem = fmt::format("on {} cannot use GPU {}: {}", mesh.hostname(), device, error);
    }
  }
  fail_unless_every_rank_has_a_gpu(mesh.world(), problem);
  NcclFactory nccl;
#if MAXCTX_HAVE_NCCL_COMMUNICATOR
  nccl = [device](const Communicator& group) { return make_nccl_communicator(group, device); };
#endif
  set_up_device_collectives(mesh, {mesh.hostname(), devices.pci_bus_ids[device]},
                            kernels::backend(Device::kCuda).allocator(), nccl);
  return mesh;
}

const kernels::Kernels& hardware_kernels(const Config& config) {
  if (!uses_gpu(config)) return kernels::backend(Device::kCpu);
  check_gpu_supports(config);
  if (emulate_gpu()) return kernels::emulated::emulated_gpu_kernels();
  return kernels::backend(Device::kCuda);
}

}  // namespace maxctx::cli

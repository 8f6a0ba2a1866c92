// hardware=cpu|gpu|gpu_multiprocess (MaxText's key): the backend a run computes with, the GPU
// each rank drives, and the mesh's collectives on device memory.
//
// One rank drives one GPU: the node-local rank (OMPI_COMM_WORLD_LOCAL_RANK, else the mesh's
// shared-memory split) modulo the GPUs the rank sees. A rank that finds no GPU fails the job on
// every rank with one line naming it. MAXCTX_EMULATE_GPU=1 (a test switch, like MAXCTX_FAULT)
// makes hardware=gpu run on the emulated GPU of kernels/emulated/: CPU kernels behind device
// memory the host cannot touch, so the CPU suite checks that the run path is device-neutral.
#pragma once

#include "maxctx/config/config.h"
#include "maxctx/kernels/kernels.h"
#include "maxctx/mesh/mesh.h"

namespace maxctx::cli {

// Whether `config` computes on a GPU (gpu, gpu_multiprocess).
bool uses_gpu(const Config& config);

// The mesh of `config` over the world; for a GPU run also selects this rank's GPU and gives
// every group its device collectives (reported once on rank 0). Collective.
Mesh mesh_for(const Config& config);

// The op table of `config`'s hardware (untraced): the cpu backend, the CUDA backend or the
// emulated GPU. mesh_for must have run first for a GPU.
const kernels::Kernels& hardware_kernels(const Config& config);

}  // namespace maxctx::cli

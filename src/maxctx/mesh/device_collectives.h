// Collectives on device memory: which backend moves each mesh group's device tensors, and the
// host-staged backend for the groups NCCL cannot serve.
//
// parallel/ calls the same Communicator verbs on every device; a view in device memory goes to
// the group's device backend (Communicator::set_device_collectives). NCCL is that backend when
// every rank of the group drives its own GPU; NCCL refuses two ranks on one GPU ("Duplicate GPU
// detected"), and Debian's Open MPI is not CUDA-aware, so a group whose ranks share a GPU (the
// only way to test context parallelism on one GPU), or the emulated GPU of the tests, uses MPI
// with every device buffer staged through host buffers by the Allocator's copy functions.
//
// What it is not: a sharding plan, or a place that names CUDA. The NCCL communicator is made by
// a factory the caller passes in (cli/hardware.cpp, under MAXCTX_HAVE_CUDA).
#pragma once

#include <functional>
#include <memory>
#include <span>
#include <string>

#include "maxctx/core/device.h"
#include "maxctx/mesh/communicator.h"
#include "maxctx/mesh/communicator_impl.h"
#include "maxctx/mesh/mesh.h"

namespace maxctx {

// The device a rank computes on, as the choice sees it.
struct DeviceIdentity {
  std::string host;    // processor name
  std::string bus_id;  // PCI bus id of the GPU ("0000:19:00.0"); kEmulatedBusId when emulated
};
inline constexpr const char* kEmulatedBusId = "emulated";

enum class DeviceCollectives { kNccl, kHostStaging };

struct DeviceCollectivesChoice {
  DeviceCollectives kind = DeviceCollectives::kHostStaging;
  std::string reason;  // "2 ranks share GPU 0000:19:00.0 on host a: ..." (for the report)
};

// Pure: the backend for a group whose ranks, in rank order, compute on `ranks`. NCCL when the
// build has it (nccl_available) and every (host, bus id) differs; host staging otherwise.
DeviceCollectivesChoice choose_device_collectives(std::span<const DeviceIdentity> ranks,
                                                  bool nccl_available);

// A CommunicatorImpl over `host` (an MPI backend) for buffers in `allocator`'s memory: each verb
// copies its device inputs into host buffers, runs `host`'s verb, and copies the results back.
std::shared_ptr<CommunicatorImpl> make_host_staged_communicator(
    std::shared_ptr<CommunicatorImpl> host, const Allocator& allocator);

// Makes the NCCL backend of one group for this rank's GPU (mesh/nccl_communicator.h).
using NcclFactory = std::function<Communicator(const Communicator& group)>;

// Collective over the world: for each group of `mesh`, gathers the ranks' identities, chooses
// (choose_device_collectives; NCCL only when `nccl` is set) and installs the device backend.
// Rank 0 prints one line per axis group of size > 1: "context axis: 2 ranks share GPU ...".
void set_up_device_collectives(Mesh& mesh, const DeviceIdentity& mine, const Allocator& allocator,
                               const NcclFactory& nccl);

}  // namespace maxctx

// The time of collectives on a hardware profile, shared by the training and inference plans:
// each axis's traffic (mesh/traffic.h: calls and bytes per collective kind) as the bytes each
// rank sends over its tier's bandwidth (ici, or dcn when the axis crosses nodes) plus a latency
// per call. Nothing overlapped.
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include "maxctx/mesh/traffic.h"
#include "maxctx/plan/hardware_profile.h"

namespace maxctx::plan {

// A communicator a run uses: its ranks and whether it crosses nodes (a dcn factor > 1).
struct GroupLink {
  int64_t ranks = 1;
  bool dcn = false;
};

// Seconds a traffic record takes on the wire: bytes each rank sends over the tier's bandwidth
// plus a latency per call (irecv counts under its isend).
double communication_seconds(const Traffic& traffic, const std::map<std::string, GroupLink>& groups,
                             const HardwareProfile& profile);

}  // namespace maxctx::plan

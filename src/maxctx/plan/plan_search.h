// `maxctx plan ... search=true`: every training mesh over data, fsdp, context, expert (for a
// mixture of experts) and tensor whose product is the device count, under every remat policy,
// planned (step_plan.h) and sorted: those that fit the device memory by predicted step time, then
// the rejected ones with the reason. The reasons are the engine's own: each candidate goes through
// load_config (the config's checks), ParallelDims::training and the trainer's axis checks
// (check_training_axes), and the weight list's tensor split (llama_weight_specs), so a rejection
// reads exactly as the error the run would stop with; only "memory" is the planner's verdict (peak
// > the profile's memory).
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "maxctx/mesh/mesh_shape.h"
#include "maxctx/plan/hardware_profile.h"
#include "maxctx/plan/step_plan.h"

namespace maxctx::plan {

struct PlanCandidate {
  // The mesh, per axis in the axis list's order (context_autoregressive, an inference axis,
  // stays 1).
  AxisArray mesh = [] {
    AxisArray ones;
    ones.fill(1);
    return ones;
  }();
  int64_t size(Axis axis) const { return mesh[axis_index(axis)]; }
  std::string remat_policy;
  bool fits = false;
  std::string reason;      // why not, when !fits
  int64_t peak_bytes = 0;  // when planned
  StepTime time;           // when fits
};

// `overrides`: the user's key=value list (its ici_/dcn_ mesh keys and remat_policy are replaced
// by each candidate's). Fitting candidates first, fastest first.
std::vector<PlanCandidate> search_training_plans(const std::string& config_path,
                                                 const std::vector<std::string>& overrides,
                                                 int64_t num_devices,
                                                 const HardwareProfile& profile);

nlohmann::json search_json(const std::vector<PlanCandidate>& candidates);
std::string search_table(const std::vector<PlanCandidate>& candidates,
                         const HardwareProfile& profile);

}  // namespace maxctx::plan

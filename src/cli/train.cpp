// `maxctx train <config> [key=value ...]`: MaxText's train.py. Prints the resolved config from
// rank 0, builds the mesh, trains (resuming from the run's latest checkpoint) and prints
// MaxText's per-step line.
#include "cli/common.h"
#include "cli/hardware.h"
#include "maxctx/core/log.h"
#include "maxctx/train/trainer.h"

namespace maxctx::cli {

int run_train(const Args& args) {
  const Config config = load_command_config(args, "train");
  log::info("{}", format_config(config));
  const Mesh mesh = mesh_for(config);
  train::Trainer trainer(config, mesh, kernels_for(config));
  trainer.run();
  return 0;
}

}  // namespace maxctx::cli

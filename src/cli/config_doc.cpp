// `maxctx config-doc`: prints docs/config.md from the declaration list (`make docs`).
#include <cstdio>

#include "cli/commands.h"
#include "maxctx/config/config.h"
#include "maxctx/core/check.h"
#include "maxctx/core/log.h"

namespace maxctx::cli {

int run_config_doc(const Args& args) {
  if (!args.empty()) fail("config-doc takes no arguments");
  if (log::rank() == 0) std::fputs(generate_config_doc().c_str(), stdout);
  return 0;
}

}  // namespace maxctx::cli

// The subcommand table of the maxctx CLI. Each subcommand lives in src/cli/<name>.cpp and is
// one function from its arguments (config path and key=value overrides) to an exit code.
#pragma once

#include <string>
#include <vector>

namespace maxctx::cli {

using Args = std::vector<std::string>;

struct Command {
  const char* name;
  const char* summary;
  int (*run)(const Args& args);
};

// Every subcommand, in the order `maxctx --help` lists them.
const std::vector<Command>& commands();
int run_command(const Args& args);

}  // namespace maxctx::cli

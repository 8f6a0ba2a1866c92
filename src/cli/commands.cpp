#include "cli/commands.h"

#include <fmt/format.h>

#include <cstdio>

#include "maxctx/core/check.h"
#include "maxctx/core/log.h"

namespace maxctx::cli {

int run_mesh(const Args& args);
int run_train(const Args& args);
int run_config(const Args& args);
int run_config_doc(const Args& args);
int run_check_logits(const Args& args);
int run_export(const Args& args);
int run_decode(const Args& args);
int run_bench_inference(const Args& args);
int run_trace_summary(const Args& args);
int run_plot(const Args& args);
int run_plan(const Args& args);
int run_probe_hardware(const Args& args);
int run_tokenize(const Args& args);

const std::vector<Command>& commands() {
  static const std::vector<Command> table = {
      {"train", "train a model (MaxText's train.py): data, fsdp, context and tensor axes",
       run_train},
      {"check-logits",
       "compare a checkpoint's logits with golden JSONL (MaxText's forward_pass_logit_checker)",
       run_check_logits},
      {"export", "write a training checkpoint as a Hugging Face Llama directory", run_export},
      {"decode",
       "generate from a prompt (MaxText's decode.py) over the context_autoregressive axis",
       run_decode},
      {"bench-inference", "prefill and decode microbenchmark (MaxText's inference_microbenchmark)",
       run_bench_inference},
      {"trace-summary",
       "per-rank compute, communication (exposed), idle time and top ops of a profiler trace",
       run_trace_summary},
      {"plot", "PNG of runs' loss, accuracy, throughput and learning rate; --trace: a timeline",
       run_plot},
      {"plan",
       "memory, communication and step time per rank for any mesh, before a run (search=true: "
       "the meshes that fit)",
       run_plan},
      {"probe-hardware", "measure this machine into a hardware profile YAML for `maxctx plan`",
       run_probe_hardware},
      {"tokenize",
       "text to token ids and back with a tokenizer file (or a JSON Lines file's texts; "
       "--bos/--eos, --decode)",
       run_tokenize},
      {"mesh", "print each rank's host, node and mesh coordinates, and every axis size", run_mesh},
      {"config", "print the resolved config (every key, then the derived values)", run_config},
      {"config-doc", "print the documentation of every config key (docs/config.md)",
       run_config_doc},
  };
  return table;
}

namespace {

void print_help() {
  std::string text =
      "maxctx: context-parallel training and inference for Llama-family models\n\n"
      "usage: maxctx <command> <config.yml> [key=value ...]\n"
      "       mpirun -np N maxctx <command> <config.yml> [key=value ...]\n\n"
      "commands:\n";
  for (const Command& c : commands()) text += fmt::format("  {:<16}{}\n", c.name, c.summary);
  text += "\nConfig keys are documented in docs/config.md (`maxctx config-doc`).\n";
  if (log::rank() == 0) std::fputs(text.c_str(), stdout);
}

}  // namespace

int run_command(const Args& args) {
  if (args.empty() || args[0] == "--help" || args[0] == "-h" || args[0] == "help") {
    print_help();
    return args.empty() ? 1 : 0;
  }
  for (const Command& c : commands()) {
    if (args[0] == c.name) return c.run(Args(args.begin() + 1, args.end()));
  }
  std::string names;
  for (const Command& c : commands())
    names += fmt::format("{}{}", names.empty() ? "" : ", ", c.name);
  fail("unknown command '{}': commands are {} (see maxctx --help)", args[0], names);
}

}  // namespace maxctx::cli

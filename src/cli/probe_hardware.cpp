// `mpirun -np 2 maxctx probe-hardware <out.yml> [name=<profile name>]`: measures this machine
// into a hardware profile (plan/hardware_profile.h) for `maxctx plan`, through the engine's
// own kernels (one rank per core, one BLAS thread, as the engine runs): the tables of
// probe_detail.h (matmuls by size and dtype, attention by head size, the vector kernels), whose
// best matmul rates are the profile's peaks and whose f32 attention at head_dim 64 over the f32
// peak is its attention fraction; the memory bandwidth (a large copy); and the shared-memory MPI
// link between the ranks (an all-gather of 16 MiB for the bandwidth, an 8-byte all-reduce for
// the latency). Every rank measures; rank 0's figures are written (the ranks run at once, so
// each sees the machine shared as a training run does; 4 ranks on 2 cores measure half a core
// each). The runtime's resident bytes (before any buffer) are added to a plan's peak. Needs at
// least 2 ranks (the link), or link_from=<profile> to take the link from another probe (a
// one-rank profile: the machine as a job that runs alone on one core sees it); dcn is written
// equal to ici (one machine).
#include <fmt/format.h>
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>
#include <thread>
#include <vector>

#include "cli/commands.h"
#include "cli/probe_detail.h"
#include "maxctx/core/check.h"
#include "maxctx/core/log.h"
#include "maxctx/core/memory_check.h"
#include "maxctx/core/split.h"
#include "maxctx/io/output_path.h"
#include "maxctx/kernels/kernels.h"
#include "maxctx/mesh/communicator.h"
#include "maxctx/mesh/root_task.h"
#include "maxctx/plan/hardware_profile.h"

namespace maxctx::cli {
namespace {

// The best rate of a measured table: the profile's peak for its kind.
double best(const std::map<int64_t, double>& table) {
  double rate = 0;
  for (const auto& [size, r] : table) rate = std::max(rate, r);
  return rate;
}

double memory_bandwidth(const kernels::Kernels& k, const Communicator& world) {
  const int64_t n = int64_t{64} << 20;  // 256 MiB of f32
  Tensor a = k.empty({n}), b = k.empty({n});
  k.fill_zero(a.view());  // a copy's speed does not depend on the values
  k.fill_zero(b.view());
  const double s = timed(world, 5, [&] { k.copy(b.view(), a.view()); });
  return 2.0 * double(n) * sizeof(float) / s;  // read + write
}

plan::LinkSpeed link_speed(const Communicator& world) {
  const int64_t part = int64_t{4} << 20;  // 16 MiB of f32 per rank
  std::vector<float> mine(static_cast<size_t>(part), 1.0f);
  std::vector<float> all(static_cast<size_t>(part * world.size()));
  const double s = timed(world, 5, [&] {
    world.all_gather<float>(std::span<const float>(mine), std::span<float>(all));
  });
  const double n = world.size();
  plan::LinkSpeed link;
  // What each rank receives of the gathered buffer: (n-1)/n of it (the plan's own convention).
  link.bandwidth = double(all.size() * sizeof(float)) * (n - 1) / n / s;
  double x = 1.0;
  link.latency =
      timed(world, 50, [&] { world.all_reduce<double>(std::span<double>(&x, 1), ReduceOp::kSum); });
  return link;
}

// getrusage's peak resident set of this process (KiB on Linux), in bytes: before the probe
// allocates anything, the runtime's own (binary, libraries, MPI's shared-memory segments).
// The CPU's last-level cache and how many logical CPUs share one (sysfs; {0, 1} where it does
// not say).
struct CacheLevel {
  double bytes = 0;
  int64_t sharing = 1;
};

int64_t cpus_in_list(const std::string& list) {  // "0-3,8,10-11" -> 7
  int64_t count = 0;
  std::stringstream in(list);
  std::string part;
  while (std::getline(in, part, ',')) {
    const size_t dash = part.find('-');
    try {
      count += dash == std::string::npos
                   ? 1
                   : std::stoll(part.substr(dash + 1)) - std::stoll(part.substr(0, dash)) + 1;
    } catch (const std::exception&) {
      return 1;
    }
  }
  return std::max<int64_t>(1, count);
}

CacheLevel last_level_cache() {
  CacheLevel best;
  int best_level = 0;
  const std::filesystem::path cpu0 = "/sys/devices/system/cpu/cpu0/cache";
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(cpu0, ec)) {
    const auto read = [&](const char* name) {
      std::ifstream in(entry.path() / name);
      std::string value;
      std::getline(in, value);
      return value;
    };
    const std::string type = read("type"), level_text = read("level"), size = read("size");
    if (type == "Instruction" || level_text.empty() || size.empty()) continue;
    const int level = std::atoi(level_text.c_str());
    if (level <= best_level) continue;
    double bytes = std::atof(size.c_str());
    if (size.back() == 'K') bytes *= 1024;
    if (size.back() == 'M') bytes *= 1024 * 1024;
    best = {bytes, cpus_in_list(read("shared_cpu_list"))};
    best_level = level;
  }
  return best;
}

double resident_bytes() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return 1024.0 * static_cast<double>(usage.ru_maxrss);
}

}  // namespace

int run_probe_hardware(const Args& args) {
  if (args.empty() || args[0].find('=') != std::string::npos) {
    fail(
        "probe-hardware needs the file to write: mpirun -np 2 maxctx probe-hardware "
        "configs/hardware/this-machine.yml [name=this-machine]");
  }
  plan::HardwareProfile p;
  p.name = "this-machine";
  std::string link_from;
  for (size_t i = 1; i < args.size(); ++i) {
    if (args[i].starts_with("name=")) {
      p.name = args[i].substr(5);
    } else if (args[i].starts_with("link_from=")) {
      link_from = args[i].substr(10);
    } else {
      fail("probe-hardware: unknown option '{}' (name=..., link_from=...)", args[i]);
    }
  }
  const Communicator world = Communicator::world();
  if (world.size() < 2 && link_from.empty()) {
    fail(
        "probe-hardware measures the link between ranks: run it under mpirun -np 2 (one rank "
        "per core, as training runs), or on one rank with link_from=<profile> to take the link "
        "from a profile probed with more");
  }
  // One rank has no link to measure; a one-rank profile (a job that leaves the other cores idle)
  // still needs one for the plans that read it. Read before the minutes of probing.
  const plan::HardwareProfile linked = link_from.empty()
                                           ? plan::HardwareProfile{}
                                           : plan::load_hardware_profile(link_from, "configs");
  // The output file too, before the minutes of probing.
  run_on_root(world, [&] { io::check_output_file(args[0], "probe-hardware's output file"); });
  // The largest rank's, after a first collective has set up the transport.
  world.barrier();
  double runtime = resident_bytes();
  world.all_reduce<double>(std::span<double>(&runtime, 1), ReduceOp::kMax);
  p.runtime_bytes = runtime;
  const kernels::Kernels& k = kernels::backend(Device::kCpu);
  p.source = fmt::format("measured by maxctx probe-hardware with {} ranks", world.size());
  p.memory_bytes = static_cast<double>(physical_memory_bytes()) / world.size();
  // The ranks (all on this machine) spread over its last-level caches; each gets its share.
  const CacheLevel llc = last_level_cache();
  const int64_t caches = std::max<int64_t>(1, std::thread::hardware_concurrency() / llc.sharing);
  p.cache_bytes = llc.bytes / static_cast<double>(ceil_div(world.size(), caches));
  p.host_memory = true;  // the cpu backend: host buffers are the device's
  probe_detail(k, world, p);
  p.flops_f32 = best(p.matmul_by_size.at("float32"));
  p.flops_bf16 = best(p.matmul_by_size.at("bfloat16"));
  p.flops_int8 = best(p.matmul_by_size.at("int8"));
  p.flops_bf16_backward = best(p.matmul_by_size.at("bfloat16_backward"));
  p.attention_fraction = std::min(1.0, p.attention_by_head_dim.at("float32").at(64) / p.flops_f32);
  p.memory_bandwidth = memory_bandwidth(k, world);
  if (link_from.empty()) {
    p.ici = link_speed(world);
    p.dcn = p.ici;
  } else {
    p.ici = linked.ici;
    p.dcn = linked.dcn;
    p.source += fmt::format(" (link from {})", link_from);
  }
  const std::string text =
      "# This machine, measured (maxctx probe-hardware); memory_bytes is the machine's memory\n"
      "# over the ranks that probed it. Rerun after a hardware change.\n" +
      plan::format_hardware_profile(p);
  run_on_root(world, [&] {
    std::ofstream out(args[0]);
    out << text;
    if (!out) fail("probe-hardware: cannot write {}", args[0]);
  });
  if (log::rank() == 0) std::fputs(text.c_str(), stdout);
  return 0;
}

}  // namespace maxctx::cli

// What the training benchmarks (bench/train, bench/context_parallel, bench/trace, bench/data)
// share: timing a Trainer's steps on every rank, the process's peak resident memory, the load
// average, the JSON of a list of times, and parsing their "--flag value" command lines.
//
// A step's time is the slowest rank's wall time from a barrier to the end of Trainer::run(1);
// its CPU time is this process's (on a shared machine the CPU time counts only the time this
// process ran, so it is the robust figure on one rank; on several ranks MPI's busy-polling
// counts waiting as CPU time too). The warm-up steps are run and never reported.
#pragma once

#include <sys/resource.h>
#include <time.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "maxctx/mesh/mesh.h"
#include "maxctx/train/trainer.h"

namespace maxctx::bench {

// Monotonic wall time in seconds (what MPI_Wtime gives, without naming MPI).
inline double wall_seconds() {
  timespec t{};
  clock_gettime(CLOCK_MONOTONIC, &t);
  return static_cast<double>(t.tv_sec) + 1e-9 * static_cast<double>(t.tv_nsec);
}

inline double process_cpu_seconds() {
  timespec t{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + 1e-9 * static_cast<double>(t.tv_nsec);
}

// getrusage's ru_maxrss (KiB on Linux): the most this process has ever had resident.
inline double peak_rss_bytes() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return 1024.0 * static_cast<double>(usage.ru_maxrss);
}

inline double load_average_1min() {
  double one_minute = -1;
  if (FILE* f = std::fopen("/proc/loadavg", "r")) {
    if (std::fscanf(f, "%lf", &one_minute) != 1) one_minute = -1;
    std::fclose(f);
  }
  return one_minute;
}

// Parses "--flag value" pairs: each flag's setter gets its value; an unknown flag prints
// "<program>: unknown option" and exits 2.
inline void parse_flags(int argc, char** argv, const char* program,
                        const std::map<std::string, std::function<void(const std::string&)>>& set) {
  for (int i = 1; i + 1 < argc; i += 2) {
    const auto it = set.find(argv[i]);
    if (it == set.end()) {
      std::fprintf(stderr, "%s: unknown option %s\n", program, argv[i]);
      std::exit(2);
    }
    it->second(argv[i + 1]);
  }
}

// "a,b,c" -> {"a", "b", "c"}: an option's list value.
inline std::vector<std::string> split_commas(const std::string& text) {
  std::vector<std::string> parts;
  std::stringstream in(text);
  for (std::string part; std::getline(in, part, ',');) parts.push_back(part);
  return parts;
}

inline std::vector<int64_t> split_ints(const std::string& text) {
  std::vector<int64_t> values;
  for (const std::string& part : split_commas(text)) values.push_back(std::stoll(part));
  return values;
}

// The median of a non-empty list (the mean of the middle two for an even count).
inline double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  const size_t n = values.size();
  return n % 2 ? values[n / 2] : 0.5 * (values[n / 2 - 1] + values[n / 2]);
}

// {"min", "median", "all"} of a non-empty list.
inline nlohmann::json time_summary(const std::vector<double>& seconds) {
  return {{"min", *std::min_element(seconds.begin(), seconds.end())},
          {"median", median(seconds)},
          {"all", seconds}};
}

struct StepTimes {
  std::vector<double> wall;  // slowest rank's, per timed step
  std::vector<double> cpu;   // this rank's process CPU time, per timed step

  void append(const StepTimes& more) {
    wall.insert(wall.end(), more.wall.begin(), more.wall.end());
    cpu.insert(cpu.end(), more.cpu.begin(), more.cpu.end());
  }
};

// The mesh a config's ici_* / dcn_* keys describe, over every rank (collective).
inline Mesh mesh_of(const Config& config) {
  MeshSpec spec;
  spec.ici = config.derived.ici_parallelism;
  spec.dcn = config.derived.dcn_parallelism;
  return Mesh(spec);
}

// Runs `warmup` steps, then `timed` steps one at a time (collective over the mesh).
inline StepTimes time_training_steps(train::Trainer& trainer, const Mesh& mesh, int warmup,
                                     int timed) {
  if (warmup > 0) trainer.run(warmup);
  StepTimes times;
  for (int i = 0; i < timed; ++i) {
    mesh.world().barrier();
    const double cpu_start = process_cpu_seconds();
    const double start = wall_seconds();
    trainer.run(1);
    double wall = wall_seconds() - start;
    times.cpu.push_back(process_cpu_seconds() - cpu_start);
    mesh.world().all_reduce(std::span<double>(&wall, 1), ReduceOp::kMax);
    times.wall.push_back(wall);
  }
  return times;
}

}  // namespace maxctx::bench

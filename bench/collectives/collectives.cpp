// Collectives benchmark: Communicator::all_gather and reduce_scatter (ring and MPI) on float
// buffers of 1, 16 and 64 MiB per rank, over MPI_COMM_WORLD (run.sh uses 2 ranks), and the
// collective watchdog's cost on an 8-byte all_reduce (off vs on, same run).
//
// Each timed iteration starts after a barrier; its time is the slowest rank's. Results are
// checked against closed forms before they are reported (a wrong fast result is not a result).
// Bandwidths follow the NCCL-tests convention, spelled out in the JSON. Rank 0 writes the JSON
// to --out (or stdout).
#include <mpi.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "maxctx/mesh/collective_watchdog.h"
#include "maxctx/mesh/communicator.h"
#include "maxctx/mesh/runtime.h"

namespace {

using maxctx::Communicator;
using maxctx::ReduceScatterAlgorithm;

constexpr int kWarmupIterations = 3;
constexpr int64_t kMiB = int64_t{1} << 20;

struct Timing {
  double min_s;
  double median_s;
  int iterations;
};

template <typename Op>
Timing time_op(const Communicator& comm, int iterations, Op&& op) {
  for (int i = 0; i < kWarmupIterations; ++i) op();
  std::vector<double> times;
  for (int i = 0; i < iterations; ++i) {
    comm.barrier();
    const double start = MPI_Wtime();
    op();
    double elapsed = MPI_Wtime() - start;
    comm.all_reduce<double>({&elapsed, 1}, maxctx::ReduceOp::kMax);
    times.push_back(elapsed);
  }
  std::sort(times.begin(), times.end());
  const size_t n = times.size();
  const double median = n % 2 ? times[n / 2] : 0.5 * (times[n / 2 - 1] + times[n / 2]);
  return {times.front(), median, iterations};
}

// Element i of rank r's input: small integers, so every sum is exact in float.
float input_value(int rank, int64_t i) { return static_cast<float>((rank + 1) * (i % 1024)); }

// Fails every rank if any rank saw a wrong element.
void require(const Communicator& comm, bool ok, const char* what) {
  int bad = ok ? 0 : 1;
  comm.all_reduce<int>({&bad, 1}, maxctx::ReduceOp::kMax);
  if (bad) {
    if (comm.rank() == 0) std::fprintf(stderr, "collectives: wrong result from %s\n", what);
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
}

nlohmann::json result(const char* op, const char* algorithm, int ranks, int64_t bytes_per_rank,
                      const Timing& t) {
  const double size_bytes = static_cast<double>(ranks) * static_cast<double>(bytes_per_rank);
  const double bus_factor = static_cast<double>(ranks - 1) / ranks;
  const double algbw = size_bytes / t.median_s / 1e9;
  const double algbw_best = size_bytes / t.min_s / 1e9;
  return {{"op", op},
          {"algorithm", algorithm},
          {"bytes_per_rank", bytes_per_rank},
          {"size_bytes", static_cast<int64_t>(size_bytes)},
          {"iterations", t.iterations},
          {"time_min_s", t.min_s},
          {"time_median_s", t.median_s},
          {"algbw_GBps", algbw},
          {"busbw_GBps", algbw * bus_factor},
          {"algbw_best_GBps", algbw_best},
          {"busbw_best_GBps", algbw_best * bus_factor}};
}

// The collective watchdog's cost where it could show: the smallest, latency-bound collective (an
// 8-byte all_reduce), per call, with the watchdog off and on (collective_timeout_seconds' default)
// in interleaved rounds of 1000 calls; medians over the rounds.
nlohmann::json watchdog_overhead(const Communicator& comm) {
  constexpr int kRounds = 21, kCalls = 1000;
  std::vector<double> per_call[2];
  double value = 1.0;
  for (int round = 0; round < kRounds; ++round) {
    for (const int on : {0, 1}) {
      maxctx::set_collective_timeout(on ? 1800.0 : 0.0);
      comm.barrier();
      const double start = MPI_Wtime();
      for (int i = 0; i < kCalls; ++i) comm.all_reduce<double>({&value, 1}, maxctx::ReduceOp::kMax);
      double elapsed = MPI_Wtime() - start;
      comm.all_reduce<double>({&elapsed, 1}, maxctx::ReduceOp::kMax);
      per_call[on].push_back(elapsed / kCalls);
    }
  }
  maxctx::set_collective_timeout(0.0);
  const auto median = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
  };
  const double off = median(per_call[0]), on = median(per_call[1]);
  return {{"op", "all_reduce of one double"},
          {"rounds", kRounds},
          {"calls_per_round", kCalls},
          {"per_call_median_us_watchdog_off", off * 1e6},
          {"per_call_median_us_watchdog_on", on * 1e6},
          {"on_over_off", on / off}};
}

}  // namespace

int main(int argc, char** argv) {
  maxctx::MpiRuntime runtime(&argc, &argv);
  std::string out_path;
  for (int i = 1; i + 1 < argc; ++i) {
    if (std::strcmp(argv[i], "--out") == 0) out_path = argv[i + 1];
  }
  const Communicator world = Communicator::world();
  const int ranks = world.size();
  const int rank = world.rank();

  nlohmann::json results = nlohmann::json::array();
  nlohmann::json ratios = nlohmann::json::array();
  for (const int64_t mib : {1, 16, 64}) {
    const int64_t bytes_per_rank = mib * kMiB;
    const int64_t per_rank = bytes_per_rank / static_cast<int64_t>(sizeof(float));
    const int64_t total = per_rank * ranks;
    const int iterations = mib == 1 ? 50 : (mib == 16 ? 10 : 5);

    // all_gather: mine (per_rank) -> gathered (ranks x per_rank).
    std::vector<float> mine(per_rank);
    std::vector<float> gathered(total);
    for (int64_t i = 0; i < per_rank; ++i) mine[i] = input_value(rank, i);
    const Timing gather =
        time_op(world, iterations, [&] { world.all_gather<float>(mine, gathered); });
    bool ok = true;
    for (int64_t i = 0; i < total; ++i) {
      ok = ok && gathered[i] == input_value(static_cast<int>(i / per_rank), i % per_rank);
    }
    require(world, ok, "all_gather");
    results.push_back(result("all_gather", "mpi", ranks, bytes_per_rank, gather));
    gathered = {};

    // reduce_scatter: full (ranks x per_rank) -> my block (per_rank) of the sum over ranks.
    std::vector<float> full(total);
    std::vector<float> block(per_rank);
    for (int64_t i = 0; i < total; ++i) full[i] = input_value(rank, i);
    const float rank_sum = static_cast<float>(ranks * (ranks + 1) / 2);
    Timing by_algorithm[2];
    for (const ReduceScatterAlgorithm algorithm :
         {ReduceScatterAlgorithm::kRing, ReduceScatterAlgorithm::kMpi}) {
      std::fill(block.begin(), block.end(), -1.0f);
      const Timing t =
          time_op(world, iterations, [&] { world.reduce_scatter<float>(full, block, algorithm); });
      bool rs_ok = true;
      for (int64_t i = 0; i < per_rank; ++i) {
        rs_ok = rs_ok && block[i] == rank_sum * static_cast<float>((rank * per_rank + i) % 1024);
      }
      require(world, rs_ok, "reduce_scatter");
      const std::string name(maxctx::algorithm_name(algorithm));
      results.push_back(result("reduce_scatter", name.c_str(), ranks, bytes_per_rank, t));
      by_algorithm[algorithm == ReduceScatterAlgorithm::kRing ? 0 : 1] = t;
    }
    ratios.push_back(
        {{"bytes_per_rank", bytes_per_rank},
         {"ring_over_mpi_speedup_median", by_algorithm[1].median_s / by_algorithm[0].median_s},
         {"ring_over_mpi_speedup_min", by_algorithm[1].min_s / by_algorithm[0].min_s}});
  }

  const nlohmann::json watchdog = watchdog_overhead(world);

  if (rank != 0) return 0;
  const nlohmann::json report = {
      {"benchmark", "collectives"},
      {"ranks", ranks},
      {"dtype", "float32"},
      {"warmup_iterations", kWarmupIterations},
      {"timing",
       "per iteration: barrier, then the slowest rank's wall time; min and median over the timed "
       "iterations"},
      {"bandwidth_convention",
       "NCCL-tests: size_bytes = ranks x bytes_per_rank (the all-gather output, the "
       "reduce-scatter input); algbw = size_bytes / time; busbw = algbw x (ranks - 1) / ranks; "
       "GBps = 1e9 bytes/s; *_GBps from the median time, *_best_GBps from the min"},
      {"default_reduce_scatter_algorithm",
       std::string(maxctx::algorithm_name(maxctx::default_reduce_scatter_algorithm()))},
      {"results", results},
      {"reduce_scatter_ring_over_mpi", ratios},
      {"collective_watchdog", watchdog}};
  if (out_path.empty()) {
    std::cout << report.dump(2) << "\n";
  } else {
    std::ofstream(out_path) << report.dump(2) << "\n";
    std::cout << "collectives: wrote " << out_path << "\n";
  }
  return 0;
}

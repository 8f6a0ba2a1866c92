// DRAM read bandwidth of the machine, the yardstick of the decode benchmark: memory-bound
// decode streams weights and KV rows once per step, so its GB/s is compared with how fast the
// cores can read a buffer far larger than the last-level cache.
//
// Every MPI rank (one per core, one thread each) sums its own 1 GiB buffer at the same time,
// `reps` passes after one untimed pass; the figure per rank is bytes / the slowest rank's time
// per pass, best pass kept (STREAM's rule). With one rank it is one core's read bandwidth; with
// two, what each of two cores gets while both read, which is what each rank of a ca = 2 decode
// can at best stream.
//   dram_bandwidth --out <json> [--mib 1024] [--reps 5]
#include <hwy/highway.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "maxctx/mesh/communicator.h"
#include "maxctx/mesh/runtime.h"

namespace hn = hwy::HWY_NAMESPACE;

namespace {

// Sum with four independent accumulators (enough loads in flight to saturate a core's misses).
float sum_floats(const float* data, int64_t n) {
  const hn::ScalableTag<float> d;
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(d));
  auto a0 = hn::Zero(d), a1 = hn::Zero(d), a2 = hn::Zero(d), a3 = hn::Zero(d);
  int64_t i = 0;
  for (; i + 4 * lanes <= n; i += 4 * lanes) {
    a0 = hn::Add(a0, hn::LoadU(d, data + i));
    a1 = hn::Add(a1, hn::LoadU(d, data + i + lanes));
    a2 = hn::Add(a2, hn::LoadU(d, data + i + 2 * lanes));
    a3 = hn::Add(a3, hn::LoadU(d, data + i + 3 * lanes));
  }
  float total = hn::GetLane(hn::SumOfLanes(d, hn::Add(hn::Add(a0, a1), hn::Add(a2, a3))));
  for (; i < n; ++i) total += data[i];
  return total;
}

}  // namespace

int main(int argc, char** argv) {
  const maxctx::MpiRuntime runtime(&argc, &argv);
  const maxctx::Communicator world = maxctx::Communicator::world();
  const int rank = world.rank(), ranks = world.size();
  std::string out_path;
  int64_t mib = 1024, reps = 5;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    if (flag == "--out") {
      out_path = argv[i + 1];
    } else if (flag == "--mib") {
      mib = std::atoll(argv[i + 1]);
    } else if (flag == "--reps") {
      reps = std::atoll(argv[i + 1]);
    } else {
      if (rank == 0) std::fprintf(stderr, "dram_bandwidth: unknown flag %s\n", flag.c_str());
      return 2;  // every rank reads the same flags, so every rank leaves here
    }
  }
  const int64_t n = mib * (int64_t{1} << 20) / int64_t{sizeof(float)};
  std::vector<float> buffer(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) buffer[i] = static_cast<float>(i & 1023) * 1e-3f;
  volatile float sink = sum_floats(buffer.data(), n);  // untimed: pages touched, caches warm
  double best = 1e30;
  for (int64_t r = 0; r < reps; ++r) {
    world.barrier();
    const auto start = std::chrono::steady_clock::now();
    sink = sum_floats(buffer.data(), n);
    double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    world.all_reduce<double>({&seconds, 1}, maxctx::ReduceOp::kMax);
    best = std::min(best, seconds);
  }
  (void)sink;
  const double bytes = double(n) * sizeof(float);
  const double per_rank = bytes / best / 1e9;
  if (rank == 0) {
    nlohmann::json j = {{"ranks", ranks},
                        {"buffer_bytes_per_rank", int64_t(bytes)},
                        {"reps", reps},
                        {"method",
                         "every rank sums its own buffer at once (one thread, 4 vector "
                         "accumulators); bytes / slowest rank's time, best pass"},
                        {"read_GB_per_second_per_rank", per_rank},
                        {"read_GB_per_second_all_ranks", per_rank * ranks}};
    std::printf("DRAM read bandwidth: %.2f GB/s per rank, %d rank(s) reading at once\n", per_rank,
                ranks);
    if (!out_path.empty()) std::ofstream(out_path) << j.dump(2) << "\n";
  }
  return 0;
}

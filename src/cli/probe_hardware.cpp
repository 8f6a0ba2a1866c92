// `mpirun -np 2 maxctx probe-hardware <out.yml> [name=<profile name>]`: measures this machine
// into a hardware profile (config/hardware_profile.h) for `maxctx plan`: the matmul FLOP/s per
// dtype through the engine's own kernels at a training-like shape (one rank per core, one BLAS
// thread, as the engine runs), training attention's FLOP/s (forward + backward, causal, counted
// as MaxText counts it) as a fraction of the f32 matmul rate, the memory bandwidth (a large
// copy), and the shared-memory MPI link between the ranks (an all-gather of 16 MiB for the
// bandwidth, an 8-byte all-reduce for the latency). Every rank measures; rank 0's figures are
// written (the ranks run at once, so each sees the machine shared as a training run does).
// The runtime's resident bytes (before any buffer) are added to a plan's peak. Needs at least
// 2 ranks (the link); dcn is written equal to ici (one machine).
#include <fmt/format.h>
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <functional>
#include <vector>

#include "cli/commands.h"
#include "maxctx/config/hardware_profile.h"
#include "maxctx/core/check.h"
#include "maxctx/core/log.h"
#include "maxctx/core/memory_check.h"
#include "maxctx/kernels/kernels.h"
#include "maxctx/mesh/communicator.h"
#include "maxctx/mesh/root_task.h"

namespace maxctx::cli {
namespace {

// The fastest of `repeats` calls of `work` after one warm-up, every rank in step: what the
// machine reaches when nothing else runs on it (the machine may be shared while probing).
double timed(const Communicator& world, int repeats, const std::function<void()>& work) {
  work();
  std::vector<double> seconds;
  for (int i = 0; i < repeats; ++i) {
    world.barrier();
    const auto start = std::chrono::steady_clock::now();
    work();
    seconds.push_back(
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  }
  return *std::min_element(seconds.begin(), seconds.end());
}

// (N, K) x (M, K)ᵀ at N = 1024 tokens, a 1024 x 1024 weight: a small model's projection.
double matmul_flops(const kernels::Kernels& k, const Communicator& world, DType dtype) {
  const int64_t N = 1024, K = 1024, M = 1024;
  Tensor in = k.empty({N, K}, dtype), w = k.empty({M, K}, dtype), out = k.empty({N, M});
  k.fill_zero(in.view());
  k.fill_zero(w.view());
  const double s = timed(world, 9, [&] { k.matmul_forward(out.view(), in.view(), w.view()); });
  return 2.0 * double(N * K * M) / s;
}

// A bf16 model's backward matmul as the engine runs it: f32 gradients (N, M) against bf16
// activations (N, K) and weights (M, K), both input and weight gradients (4·N·K·M FLOPs).
double mixed_backward_flops(const kernels::Kernels& k, const Communicator& world) {
  const int64_t N = 1024, K = 1024, M = 1024;
  const DType operands = parse_dtype("bfloat16");
  Tensor in = k.empty({N, K}, operands), w = k.empty({M, K}, operands), d_out = k.empty({N, M}),
         d_in = k.empty({N, K}), d_w = k.empty({M, K});
  for (Tensor* t : {&in, &w, &d_out, &d_w}) k.fill_zero(t->view());
  const double s = timed(world, 9, [&] {
    k.matmul_backward(d_in.view(), d_w.view(), d_out.view(), in.view(), w.view());
  });
  return 4.0 * double(N * K * M) / s;
}

double int8_matmul_flops(const kernels::Kernels& k, const Communicator& world) {
  const int64_t N = 1024, K = 1024, M = 1024;
  Tensor in = k.empty({N, K}), w = k.empty({M, K}), out = k.empty({N, M});
  k.fill_zero(in.view());
  k.fill_zero(w.view());
  const kernels::Int8Weights packed = k.int8_pack_weights(w.view());
  kernels::Int8Rows rows;
  k.int8_quantize_rows(rows, in.view());
  const double s = timed(world, 9, [&] { k.int8_matmul_forward(out.view(), rows, packed); });
  return 2.0 * double(N * K * M) / s;
}

// Causal attention forward + backward, S = 2048, 8 heads of 64, counted as MaxText counts it
// (4·S²·H·D/2 forward, x3 with the backward).
double attention_flops(const kernels::Kernels& k, const Communicator& world) {
  kernels::AttentionParams p;
  p.batch = 1;
  p.seq_q = p.seq_k = 2048;
  p.heads_q = p.heads_kv = 8;
  p.head_dim = 64;
  const int64_t n = p.seq_q * p.heads_q * p.head_dim;
  Tensor q = k.empty({n}), kk = k.empty({n}), v = k.empty({n}), out = k.empty({n}),
         lse = k.empty({p.heads_q * p.seq_q}), dq = k.empty({n}), dk = k.empty({n}),
         dv = k.empty({n});
  for (Tensor* t : {&q, &kk, &v, &dq, &dk, &dv}) k.fill_zero(t->view());
  std::vector<int32_t> pos(static_cast<size_t>(p.seq_q)), seg(pos.size(), 1);
  for (size_t i = 0; i < pos.size(); ++i) pos[i] = static_cast<int32_t>(i);
  const double s = timed(world, 3, [&] {
    k.attention_forward(out.view(), lse.view(), q.view(), kk.view(), v.view(), pos.data(),
                        seg.data(), pos.data(), seg.data(), p, nullptr);
    k.attention_backward(dq.view(), dk.view(), dv.view(), out.view(), out.view(), lse.view(),
                         q.view(), kk.view(), v.view(), pos.data(), seg.data(), pos.data(),
                         seg.data(), p, nullptr);
  });
  return 3.0 * 4.0 * double(p.seq_q * p.seq_k * p.heads_q * p.head_dim) / 2 / s;
}

double memory_bandwidth(const kernels::Kernels& k, const Communicator& world) {
  const int64_t n = int64_t{64} << 20;  // 256 MiB of f32
  Tensor a = k.empty({n}), b = k.empty({n});
  k.fill_zero(a.view());
  k.fill_zero(b.view());
  const double s = timed(world, 5, [&] { k.copy(b.view(), a.view()); });
  return 2.0 * double(n) * sizeof(float) / s;  // read + write
}

LinkSpeed link_speed(const Communicator& world) {
  const int64_t part = int64_t{4} << 20;  // 16 MiB of f32 per rank
  std::vector<float> mine(static_cast<size_t>(part), 1.0f);
  std::vector<float> all(static_cast<size_t>(part * world.size()));
  const double s = timed(world, 5, [&] {
    world.all_gather<float>(std::span<const float>(mine), std::span<float>(all));
  });
  const double n = world.size();
  LinkSpeed link;
  // What each rank receives of the gathered buffer: (n-1)/n of it (the plan's own convention).
  link.bandwidth = double(all.size() * sizeof(float)) * (n - 1) / n / s;
  double x = 1.0;
  link.latency =
      timed(world, 50, [&] { world.all_reduce<double>(std::span<double>(&x, 1), ReduceOp::kSum); });
  return link;
}

// getrusage's peak resident set of this process (KiB on Linux), in bytes: before the probe
// allocates anything, the runtime's own (binary, libraries, MPI's shared-memory segments).
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
  HardwareProfile p;
  p.name = "this-machine";
  for (size_t i = 1; i < args.size(); ++i) {
    if (!args[i].starts_with("name="))
      fail("probe-hardware: unknown option '{}' (name=...)", args[i]);
    p.name = args[i].substr(5);
  }
  const Communicator world = Communicator::world();
  if (world.size() < 2) {
    fail(
        "probe-hardware measures the link between ranks: run it under mpirun -np 2 (one rank "
        "per core, as training runs)");
  }
  // The largest rank's, after a first collective has set up the transport.
  world.barrier();
  double runtime = resident_bytes();
  world.all_reduce<double>(std::span<double>(&runtime, 1), ReduceOp::kMax);
  p.runtime_bytes = runtime;
  const kernels::Kernels& k = kernels::backend(Device::kCpu);
  p.source = fmt::format("measured by maxctx probe-hardware with {} ranks", world.size());
  p.memory_bytes = static_cast<double>(physical_memory_bytes()) / world.size();
  p.flops_f32 = matmul_flops(k, world, parse_dtype("float32"));
  p.flops_bf16 = matmul_flops(k, world, parse_dtype("bfloat16"));
  p.flops_int8 = int8_matmul_flops(k, world);
  p.flops_bf16_backward = mixed_backward_flops(k, world);
  p.attention_fraction = std::min(1.0, attention_flops(k, world) / p.flops_f32);
  p.memory_bandwidth = memory_bandwidth(k, world);
  p.ici = link_speed(world);
  p.dcn = p.ici;
  const std::string text =
      "# This machine, measured (maxctx probe-hardware); memory_bytes is the machine's memory\n"
      "# over the ranks that probed it. Rerun after a hardware change.\n" +
      format_hardware_profile(p);
  run_on_root(world, [&] {
    std::ofstream out(args[0]);
    out << text;
    if (!out) fail("probe-hardware: cannot write {}", args[0]);
  });
  if (log::rank() == 0) std::fputs(text.c_str(), stdout);
  return 0;
}

}  // namespace maxctx::cli

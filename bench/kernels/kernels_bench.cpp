// Kernel benchmark on one core: measured fp32 FMA peak, SGEMM at 1024³ and at the model's
// projection shapes (the project's sgemm, with OpenBLAS beside it as a same-run ratio), the bf16
// GEMM at maxctx-20m/100m training shapes against the measured vdpbf16ps peak (fp32 sgemm and
// oneDNN beside it), and
// causal attention forward/backward at S = 4096, Hq = 8, Hkv = 2, D = 128, each as a fraction of
// that peak, plus the reference kernel and (from a JSON file written by attention_torch.py in
// the same run) torch 1.13 as ratios. Writes one JSON object to --out.
//
// Decode attention (one query per slot against a KV cache; B = 1, Hq = 8, Hkv = 2, D = 32) is
// memory-bound: it is rated in GB/s of K and V read, single_query_attention beside the general
// kernel at seq_q = 1, for a 32K cache read repeatedly (it fits in L3), the same cycled over
// separate per-layer caches (as a model's layers read them: from DRAM), and a 128K cache.
//
// Run it through run.sh, which pins it to one core with one OpenMP/BLAS thread. Rates use the
// process CPU time of the best of a few repetitions: the machine is shared, and CPU time counts
// only the time this process ran (wall times are reported beside them). Useful FLOPs for causal
// attention: forward 2·S²·D·Hq (half of 4·S²·D·Hq), backward 2.5 times that; the work the kernel
// does beyond them (the masked half of diagonal tiles, the softmax) is not counted.
#include <cblas.h>
#include <time.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "kernels/attention_bf16_bench.h"
#include "kernels/fma_peak.h"
#include "kernels/onednn_matmul.h"
#include "maxctx/core/rng.h"
#include "maxctx/kernels/cpu/attention.h"
#include "maxctx/kernels/cpu/attention_tiles.h"
#include "maxctx/kernels/cpu/gemm_bf16.h"
#include "maxctx/kernels/cpu/gemv.h"
#include "maxctx/kernels/cpu/int8.h"
#include "maxctx/kernels/cpu/sgemm.h"
#include "maxctx/kernels/cpu/single_query_attention.h"
#include "maxctx/kernels/kernels.h"
#include "maxctx/kernels/ref/attention.h"
#include "nlohmann/json.hpp"

namespace {

using maxctx::kernels::AttentionParams;
using maxctx::kernels::AttentionStats;
using nlohmann::json;

double process_cpu_seconds() {
  timespec t{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + 1e-9 * static_cast<double>(t.tv_nsec);
}

struct Timing {
  double cpu_seconds = 1e30;   // process CPU time: what the rates use
  double wall_seconds = 1e30;  // of the same repetition
};

// The repetition of `body` with the least CPU time.
Timing best_of(int reps, const std::function<void()>& body) {
  Timing best;
  for (int r = 0; r < reps; ++r) {
    const double cpu_start = process_cpu_seconds();
    const auto wall_start = std::chrono::steady_clock::now();
    body();
    const std::chrono::duration<double> wall = std::chrono::steady_clock::now() - wall_start;
    const double cpu = process_cpu_seconds() - cpu_start;
    if (cpu < best.cpu_seconds) best = {cpu, wall.count()};
  }
  return best;
}

double load_average() {
  double one_minute = -1;
  if (FILE* f = std::fopen("/proc/loadavg", "r")) {
    if (std::fscanf(f, "%lf", &one_minute) != 1) one_minute = -1;
    std::fclose(f);
  }
  return one_minute;
}

double fma_peak_gflops() {
  constexpr int64_t kIterations = 20'000'000;
  float checksum = 0;
  const Timing took = best_of(5, [&] { checksum += maxctx::bench::run_fma_chains(kIterations); });
  // Printed so that the chains cannot be optimised away.
  std::fprintf(stderr, "fma checksum %g\n", static_cast<double>(checksum));
  const double flops = 2.0 * maxctx::bench::kFmaChains *
                       static_cast<double>(maxctx::bench::fma_vector_lanes()) * kIterations;
  return flops / took.cpu_seconds / 1e9;
}

// vdpbf16ps throughput (fma_peak.h), 0 where the CPU lacks AVX512_BF16.
double dpbf16_peak_gflops() {
  if (!maxctx::bench::dpbf16_available()) return 0.0;
  constexpr int64_t kIterations = 20'000'000;
  float checksum = 0;
  const Timing took =
      best_of(5, [&] { checksum += maxctx::bench::run_dpbf16_chains(kIterations); });
  std::fprintf(stderr, "dpbf16 checksum %g\n", static_cast<double>(checksum));
  return 64.0 * maxctx::bench::kFmaChains * kIterations / took.cpu_seconds / 1e9;
}

std::vector<float> normal(int64_t n, const char* stream) {
  std::vector<float> x(static_cast<size_t>(n));
  maxctx::rng::fill_normal(x, 1234, maxctx::rng::stream_id(stream), 0, 0.0f, 1.0f);
  return x;
}

json rate(double flops, const Timing& t, double peak, double target) {
  const double gflops = flops / t.cpu_seconds / 1e9;
  return {{"cpu_seconds", t.cpu_seconds},
          {"wall_seconds", t.wall_seconds},
          {"gflops", gflops},
          {"fraction_of_peak", gflops / peak},
          {"target_fraction", target},
          {"meets_target", gflops / peak >= target}};
}

// One product C (m×n) = op(A) · op(B) on the SGEMM the model's matmuls use
// (kernels/cpu/sgemm.h), and on OpenBLAS in the same run, dense row-major operands.
json gemm_product(int m, int n, int k, bool trans_a, bool trans_b, int reps, double peak) {
  namespace cpu = maxctx::kernels::cpu;
  const auto a = normal(int64_t{m} * k, "a");
  const auto b = normal(int64_t{k} * n, "b");
  std::vector<float> c(static_cast<size_t>(m) * n);
  const int lda = trans_a ? m : k;
  const int ldb = trans_b ? k : n;
  const double flops = 2.0 * m * n * static_cast<double>(k);
  const Timing ours = best_of(reps, [&] {
    cpu::sgemm(trans_a ? cpu::Transpose::kYes : cpu::Transpose::kNo,
               trans_b ? cpu::Transpose::kYes : cpu::Transpose::kNo, m, n, k, 1.0f, a.data(), lda,
               b.data(), ldb, 0.0f, c.data(), n);
  });
  const Timing openblas = best_of(reps, [&] {
    cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans,
                trans_b ? CblasTrans : CblasNoTrans, m, n, k, 1.0f, a.data(), lda, b.data(), ldb,
                0.0f, c.data(), n);
  });
  json result = rate(flops, ours, peak, 0.80);
  result["kernel"] = std::string("maxctx sgemm (") + cpu::sgemm_simd_target() + ")";
  result["shape"] = {{"m", m}, {"n", n}, {"k", k}, {"trans_a", trans_a}, {"trans_b", trans_b}};
  result["openblas"] = rate(flops, openblas, peak, 0.80);
  result["speedup_vs_openblas"] = openblas.cpu_seconds / ours.cpu_seconds;
  return result;
}

// The three products of each projection of a 2048-token micro-batch at width 512 (attention,
// MLP up to 1536, a 4096 vocabulary head): forward out = in·Wᵀ, d_in = d_out·W and
// d_W = d_outᵀ·in, as kernels/cpu/matmul.cpp calls them.
json model_products(double peak) {
  constexpr int kTokens = 2048, kWidth = 512;
  json result = json::array();
  for (const int out_dim : {512, 1536, 4096}) {
    const struct {
      const char* product;
      int m, n, k;
      bool trans_a, trans_b;
    } kProducts[] = {{"forward", kTokens, out_dim, kWidth, false, true},
                     {"d_in", kTokens, kWidth, out_dim, false, false},
                     {"d_weight", out_dim, kWidth, kTokens, true, false}};
    for (const auto& p : kProducts) {
      json one = gemm_product(p.m, p.n, p.k, p.trans_a, p.trans_b, 3, peak);
      one["product"] = p.product;
      result.push_back(one);
    }
  }
  return result;
}

// One product C (m×n, f32) = op(A) · op(B) with bf16 A and B: gemm_bf16 as a fraction of the
// vdpbf16ps peak, fp32 sgemm on the same values as a fraction of the FMA peak, oneDNN's bf16
// matmul (null without it), all in this run; speedup = sgemm time / gemm_bf16 time.
json bf16_product(int m, int n, int k, bool trans_a, bool trans_b, int reps, double fma_peak,
                  double bf16_peak) {
  namespace cpu = maxctx::kernels::cpu;
  const auto a = normal(int64_t{m} * k, "a");
  const auto b = normal(int64_t{k} * n, "b");
  std::vector<maxctx::bf16> a16(a.size()), b16(b.size());
  maxctx::convert_f32_to_bf16(a, a16);
  maxctx::convert_f32_to_bf16(b, b16);
  std::vector<float> c(static_cast<size_t>(m) * n);
  const int lda = trans_a ? m : k;
  const int ldb = trans_b ? k : n;
  const auto ta = trans_a ? cpu::Transpose::kYes : cpu::Transpose::kNo;
  const auto tb = trans_b ? cpu::Transpose::kYes : cpu::Transpose::kNo;
  const double flops = 2.0 * m * n * static_cast<double>(k);
  const Timing bf16 = best_of(reps, [&] {
    cpu::gemm_bf16(ta, tb, m, n, k, 1.0f, {a16.data(), maxctx::DType::kBF16}, lda,
                   {b16.data(), maxctx::DType::kBF16}, ldb, 0.0f, {c.data(), maxctx::DType::kF32},
                   n);
  });
  const Timing f32 = best_of(reps, [&] {
    cpu::sgemm(ta, tb, m, n, k, 1.0f, a.data(), lda, b.data(), ldb, 0.0f, c.data(), n);
  });
  json result = rate(flops, bf16, bf16_peak, 0.70);
  result["kernel"] = std::string("maxctx gemm_bf16 (") + cpu::gemm_bf16_kernel_name() + ")";
  result["shape"] = {{"m", m}, {"n", n}, {"k", k}, {"trans_a", trans_a}, {"trans_b", trans_b}};
  result["sgemm_fp32"] = rate(flops, f32, fma_peak, 0.80);
  result["speedup_bf16_over_fp32"] = f32.cpu_seconds / bf16.cpu_seconds;
  const auto onednn = maxctx::bench::onednn_bf16_matmul(m, n, k, trans_a, trans_b, a16.data(),
                                                        b16.data(), c.data());
  result["onednn_bf16"] = nullptr;
  if (onednn) {
    onednn();  // first call: oneDNN's JIT and scratchpad
    const Timing t = best_of(reps, onednn);
    result["onednn_bf16"] = rate(flops, t, bf16_peak, 0.70);
    result["speedup_vs_onednn"] = t.cpu_seconds / bf16.cpu_seconds;
  }
  return result;
}

// The training products of maxctx-20m and maxctx-100m (configs/models/*.yml) at S = 2048 tokens:
// each distinct projection (in_dim → out_dim: q/o, k/v, gate/up, down, the vocabulary head),
// forward, d_in and d_weight as kernels/cpu/matmul.cpp calls them.
json bf16_model_products(double fma_peak, double bf16_peak) {
  constexpr int kTokens = 2048;
  const struct {
    const char* model;
    int emb, kv, mlp, vocab;  // kv = kv_heads · head_dim
  } kModels[] = {{"maxctx-20m", 512, 128, 1536, 4096}, {"maxctx-100m", 1024, 256, 2816, 8192}};
  json result = json::array();
  for (const auto& model : kModels) {
    const std::pair<int, int> projections[] = {{model.emb, model.emb},
                                               {model.emb, model.kv},
                                               {model.emb, model.mlp},
                                               {model.mlp, model.emb},
                                               {model.emb, model.vocab}};
    for (const auto& [in_dim, out_dim] : projections) {
      const struct {
        const char* product;
        int m, n, k;
        bool trans_a, trans_b;
      } kProducts[] = {{"forward", kTokens, out_dim, in_dim, false, true},
                       {"d_in", kTokens, in_dim, out_dim, false, false},
                       {"d_weight", out_dim, in_dim, kTokens, true, false}};
      for (const auto& p : kProducts) {
        json one = bf16_product(p.m, p.n, p.k, p.trans_a, p.trans_b, 3, fma_peak, bf16_peak);
        one["model"] = model.model;
        one["projection"] = {{"in_dim", in_dim}, {"out_dim", out_dim}};
        one["product"] = p.product;
        result.push_back(one);
      }
    }
  }
  return result;
}

// AMX tdpbf16ps throughput (fma_peak.h), 0 where the CPU or the kernel does not allow it.
double amx_peak_gflops() {
  if (!maxctx::kernels::cpu::gemm_bf16_amx_available()) return 0.0;
  constexpr int64_t kIterations = 2'000'000;
  float checksum = 0;
  const Timing took = best_of(5, [&] { checksum += maxctx::bench::run_amx_tiles(kIterations); });
  std::fprintf(stderr, "amx checksum %g\n", static_cast<double>(checksum));
  return 4.0 * 16 * 16 * 32 * 2 * kIterations / took.cpu_seconds / 1e9;
}

// Fractions are of the peak of the instruction gemm_bf16 runs (AMX where present, else vdpbf16ps).
json bf16_gemm(double fma_peak, double dpbf16_peak, double amx_peak) {
  const double bf16_peak = amx_peak > 0 ? amx_peak : dpbf16_peak;
  json products = bf16_model_products(fma_peak, bf16_peak);
  double bf16_s = 0, f32_s = 0, onednn_s = 0, flops = 0;
  for (const json& p : products) {
    flops += p["gflops"].get<double>() * p["cpu_seconds"].get<double>();
    bf16_s += p["cpu_seconds"].get<double>();
    f32_s += p["sgemm_fp32"]["cpu_seconds"].get<double>();
    if (!p["onednn_bf16"].is_null()) onednn_s += p["onednn_bf16"]["cpu_seconds"].get<double>();
  }
  json summary = {{"gemm_bf16_fraction_of_peak", flops / bf16_s / bf16_peak},
                  {"sgemm_fraction_of_fma_peak", flops / f32_s / fma_peak},
                  {"speedup_bf16_over_fp32", f32_s / bf16_s},
                  {"onednn_fraction_of_peak", nullptr},
                  {"speedup_vs_onednn", nullptr}};
  if (onednn_s > 0) {
    summary["onednn_fraction_of_peak"] = flops / onednn_s / bf16_peak;
    summary["speedup_vs_onednn"] = onednn_s / bf16_s;
  }
  return {{"dpbf16_peak_gflops", dpbf16_peak},
          {"amx_peak_gflops", amx_peak},
          {"kernel", maxctx::kernels::cpu::gemm_bf16_kernel_name()},
          {"fma_peak_gflops", fma_peak},
          {"onednn", maxctx::bench::onednn_available() ? "libdnnl (matmul primitive)" : "absent"},
          {"summary_over_all_products", summary},
          {"products", products}};
}

// One score product of an attention tile, S (256×128) = Q (256×128) · Kᵀ, operands cache-hot:
// OpenBLAS against the Highway tile GEMM the attention kernel uses. Explains the attention
// figures next to the 1024³ SGEMM one.
json tile_products(double peak) {
  constexpr int kRows = 256, kKeys = 128, kDim = 128;
  const auto q = normal(kRows * kDim, "tile_q");
  const auto k = normal(kKeys * kDim, "tile_k");              // (keys, D), as K is stored
  std::vector<float> k_t(static_cast<size_t>(kDim * kKeys));  // (D, keys), as the kernel packs it
  for (int c = 0; c < kKeys; ++c) {
    for (int d = 0; d < kDim; ++d)
      k_t[static_cast<size_t>(d * kKeys + c)] = k[static_cast<size_t>(c * kDim + d)];
  }
  std::vector<float> s(static_cast<size_t>(kRows * kKeys));
  constexpr int kCalls = 200;
  const double flops = 2.0 * kRows * kKeys * kDim * kCalls;
  const Timing blas = best_of(5, [&] {
    for (int i = 0; i < kCalls; ++i) {
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, kRows, kKeys, kDim, 1.0f, q.data(), kDim,
                  k.data(), kDim, 0.0f, s.data(), kKeys);
    }
  });
  const Timing tile = best_of(5, [&] {
    for (int i = 0; i < kCalls; ++i) {
      maxctx::kernels::cpu::attention_tile_gemm(kRows, kKeys, kDim, 1.0f, q.data(), kDim, false,
                                                k_t.data(), kKeys, false, s.data(), kKeys);
    }
  });
  return {{"shape", "256x128x128 (S = Q K^T)"},
          {"openblas_gflops", flops / blas.cpu_seconds / 1e9},
          {"openblas_fraction_of_peak", flops / blas.cpu_seconds / 1e9 / peak},
          {"attention_tile_gemm_gflops", flops / tile.cpu_seconds / 1e9},
          {"attention_tile_gemm_fraction_of_peak", flops / tile.cpu_seconds / 1e9 / peak}};
}

// Causal attention inputs and outputs for one batch element.
struct Problem {
  explicit Problem(const AttentionParams& p)
      : q(normal(p.seq_q * p.heads_q * p.head_dim, "q")),
        k(normal(p.seq_k * p.heads_kv * p.head_dim, "k")),
        v(normal(p.seq_k * p.heads_kv * p.head_dim, "v")),
        d_out(normal(p.seq_q * p.heads_q * p.head_dim, "d_out")),
        out(q.size()),
        lse(static_cast<size_t>(p.heads_q * p.seq_q)),
        dq(q.size()),
        dk(k.size()),
        dv(v.size()),
        pos(static_cast<size_t>(p.seq_q)),
        seg(static_cast<size_t>(p.seq_q), 0) {
    for (size_t i = 0; i < pos.size(); ++i) pos[i] = static_cast<int32_t>(i);
  }
  std::vector<float> q, k, v, d_out, out, lse, dq, dk, dv;
  std::vector<int32_t> pos, seg;  // causal: positions 0..S-1, one segment
};

AttentionParams causal_params(int64_t seq) {
  AttentionParams p;
  p.batch = 1;
  p.seq_q = p.seq_k = seq;
  p.heads_q = 8;
  p.heads_kv = 2;
  p.head_dim = 128;
  return p;
}

double causal_forward_flops(const AttentionParams& p) {
  return 2.0 * static_cast<double>(p.seq_q) * static_cast<double>(p.seq_k) *
         static_cast<double>(p.head_dim * p.heads_q);
}

// The cpu kernel at S = 4096, the reference at S = 1024 scaled, and torch's figure if given.
json attention(double peak, const std::string& torch_path) {
  namespace cpu = maxctx::kernels::cpu;
  const AttentionParams p = causal_params(4096);
  Problem prob(p);
  AttentionStats stats;
  auto forward = [&](AttentionStats* s) {
    cpu::attention_forward(prob.out.data(), prob.lse.data(), prob.q.data(), prob.k.data(),
                           prob.v.data(), prob.pos.data(), prob.seg.data(), prob.pos.data(),
                           prob.seg.data(), p, s);
  };
  forward(&stats);  // warm-up, and the tile counts
  const Timing fwd = best_of(3, [&] { forward(nullptr); });
  const Timing bwd = best_of(3, [&] {
    cpu::attention_backward(prob.dq.data(), prob.dk.data(), prob.dv.data(), prob.d_out.data(),
                            prob.out.data(), prob.lse.data(), prob.q.data(), prob.k.data(),
                            prob.v.data(), prob.pos.data(), prob.seg.data(), prob.pos.data(),
                            prob.seg.data(), p, nullptr);
  });
  const double fwd_flops = causal_forward_flops(p);
  json result;
  result["shape"] = {{"batch", p.batch},       {"seq", p.seq_q},         {"heads_q", p.heads_q},
                     {"heads_kv", p.heads_kv}, {"head_dim", p.head_dim}, {"mask", "causal"}};
  result["useful_gflop"] = {{"forward", fwd_flops / 1e9}, {"backward", 2.5 * fwd_flops / 1e9}};
  result["forward"] = rate(fwd_flops, fwd, peak, 0.60);
  result["backward"] = rate(2.5 * fwd_flops, bwd, peak, 0.40);
  result["tiles"] = {{"computed", stats.blocks_computed}, {"skipped", stats.blocks_skipped}};

  // The reference is O(S²) plain loops: timed at S = 1024 and scaled by (4096 / 1024)².
  const AttentionParams p_ref = causal_params(1024);
  Problem small(p_ref);
  const Timing ref = best_of(1, [&] {
    maxctx::kernels::ref::attention_forward<float>(
        small.out.data(), small.lse.data(), small.q.data(), small.k.data(), small.v.data(),
        small.pos.data(), small.seg.data(), small.pos.data(), small.seg.data(), p_ref, nullptr);
  });
  const double ref_scale = fwd_flops / causal_forward_flops(p_ref);
  result["ref_forward"] = {{"measured_seq", p_ref.seq_q},
                           {"measured_cpu_seconds", ref.cpu_seconds},
                           {"scaled_by", ref_scale},
                           {"cpu_seconds_at_4096", ref.cpu_seconds * ref_scale},
                           {"cpu_over_ref_speedup", ref.cpu_seconds * ref_scale / fwd.cpu_seconds}};

  json torch = "unavailable";
  if (!torch_path.empty()) {
    std::ifstream in(torch_path);
    const json t = in ? json::parse(in, nullptr, false) : json();
    if (t.is_object() && t.contains("forward_cpu_seconds")) {
      torch = t;
      torch["torch_over_ours_forward"] = t["forward_cpu_seconds"].get<double>() / fwd.cpu_seconds;
    }
  }
  result["torch"] = torch;
  return result;
}

// Decode attention over a cache of seq_k rows (positions 0..seq_k-1, the query at the last one,
// so every row is visible), `layers` separate caches read in turn, one call per layer.
json decode_attention_case(int64_t seq_k, int64_t layers, int reps) {
  namespace cpu = maxctx::kernels::cpu;
  AttentionParams p;
  p.batch = 1;
  p.seq_q = 1;
  p.seq_k = seq_k;
  p.heads_q = 8;
  p.heads_kv = 2;
  p.head_dim = 32;
  const int64_t kv_numel = p.seq_k * p.heads_kv * p.head_dim;
  const auto q = normal(p.heads_q * p.head_dim, "decode_q");
  std::vector<std::vector<float>> k, v;  // per layer (Sk, Hkv, D)
  for (int64_t l = 0; l < layers; ++l) {
    k.push_back(normal(kv_numel, "decode_k"));
    v.push_back(normal(kv_numel, "decode_v"));
  }
  std::vector<int32_t> k_pos(static_cast<size_t>(seq_k)), k_seg(k_pos.size(), 1);
  for (size_t j = 0; j < k_pos.size(); ++j) k_pos[j] = static_cast<int32_t>(j);
  const int32_t q_pos = static_cast<int32_t>(seq_k - 1), q_seg = 1;
  std::vector<float> out(q.size()), lse(static_cast<size_t>(p.heads_q));
  const double bytes = 2.0 * static_cast<double>(kv_numel) * sizeof(float);
  auto measure = [&](const auto& forward) {
    for (int64_t l = 0; l < layers; ++l) forward(l);  // warm-up: page faults, caches
    const Timing t = best_of(reps, [&] {
      for (int64_t l = 0; l < layers; ++l) forward(l);
    });
    const double calls = static_cast<double>(layers);
    return json{{"cpu_seconds_per_call", t.cpu_seconds / calls},
                {"wall_seconds_per_call", t.wall_seconds / calls},
                {"gb_per_s", bytes * calls / t.cpu_seconds / 1e9}};
  };
  const json decode = measure([&](int64_t l) {
    cpu::single_query_attention(out.data(), lse.data(), q.data(), k[l].data(), v[l].data(), &q_pos,
                                &q_seg, k_pos.data(), k_seg.data(), p);
  });
  const json general = measure([&](int64_t l) {
    cpu::attention_forward(out.data(), lse.data(), q.data(), k[l].data(), v[l].data(), &q_pos,
                           &q_seg, k_pos.data(), k_seg.data(), p);
  });
  // The same rows as an int8 cache (quantize_kvcache): codes and one scale per row.
  const int64_t row = p.heads_kv * p.head_dim;
  std::vector<std::vector<int8_t>> k8, v8;
  std::vector<std::vector<float>> k_scale, v_scale;
  for (int64_t l = 0; l < layers; ++l) {
    k8.emplace_back(static_cast<size_t>(kv_numel));
    v8.emplace_back(static_cast<size_t>(kv_numel));
    k_scale.emplace_back(static_cast<size_t>(seq_k));
    v_scale.emplace_back(static_cast<size_t>(seq_k));
    cpu::quantize_rows_int8(k8[l].data(), k_scale[l].data(), k[l].data(), seq_k, row, 127.5f);
    cpu::quantize_rows_int8(v8[l].data(), v_scale[l].data(), v[l].data(), seq_k, row, 127.5f);
  }
  json int8 = measure([&](int64_t l) {
    cpu::single_query_attention_int8(out.data(), lse.data(), q.data(), k8[l].data(),
                                     k_scale[l].data(), v8[l].data(), v_scale[l].data(), &q_pos,
                                     &q_seg, k_pos.data(), k_seg.data(), p);
  });
  // gb_per_s above counts fp32 bytes; the int8 cache reads a quarter of them plus the scales.
  int8["int8_gb_per_s"] = int8["gb_per_s"].get<double>() * (2.0 * kv_numel + 8.0 * seq_k) / bytes;
  return {{"seq_k", seq_k},
          {"layers_cycled", layers},
          {"kv_mib_per_call", bytes / (1 << 20)},
          {"decode", decode},
          {"general_seq_q1", general},
          {"int8_cache", int8},
          {"speedup", general["cpu_seconds_per_call"].get<double>() /
                          decode["cpu_seconds_per_call"].get<double>()}};
}

// One token row through the maxctx-100m projections (q, k, v, o, gate, up, down per layer; 8
// layers, 361 MB, past the L3 so every call streams from DRAM): the project's gemv_forward
// against OpenBLAS's sgemv on the same matrices, alternating per repetition.
json gemv() {
  struct Projection {
    int64_t out_dim, in_dim;
  };
  const Projection layer[] = {{1024, 1024}, {256, 1024},  {256, 1024}, {1024, 1024},
                              {2816, 1024}, {2816, 1024}, {1024, 2816}};
  constexpr int64_t kLayers = 8;
  std::vector<std::vector<float>> weights;
  std::vector<std::vector<maxctx::bf16>> weights16;
  double bytes = 0;
  for (int64_t l = 0; l < kLayers; ++l) {
    for (const Projection& w : layer) {
      weights.push_back(normal(w.out_dim * w.in_dim, "gemv_w"));
      weights16.emplace_back(weights.back().size());
      maxctx::convert_f32_to_bf16(weights.back(), weights16.back());
      bytes += 4.0 * double(w.out_dim * w.in_dim);
    }
  }
  const auto x = normal(2816, "gemv_x");
  std::vector<float> y(2816);
  auto pass_bf16 = [&] {
    size_t i = 0;
    for (int64_t l = 0; l < kLayers; ++l) {
      for (const Projection& w : layer) {
        maxctx::kernels::cpu::gemv_forward_bf16(y.data(), x.data(), weights16[i++].data(), w.in_dim,
                                                w.out_dim);
      }
    }
  };
  auto pass = [&](bool blas) {
    size_t i = 0;
    for (int64_t l = 0; l < kLayers; ++l) {
      for (const Projection& w : layer) {
        const float* m = weights[i++].data();
        if (blas) {
          cblas_sgemv(CblasRowMajor, CblasNoTrans, static_cast<int>(w.out_dim),
                      static_cast<int>(w.in_dim), 1.0f, m, static_cast<int>(w.in_dim), x.data(), 1,
                      0.0f, y.data(), 1);
        } else {
          maxctx::kernels::cpu::gemv_forward(y.data(), x.data(), m, w.in_dim, w.out_dim);
        }
      }
    }
  };
  pass(false);  // warm-up: page faults
  pass(true);
  pass_bf16();
  Timing ours, blas, ours16;
  for (int r = 0; r < 7; ++r) {
    const Timing a = best_of(1, [&] { pass(false); });
    const Timing b = best_of(1, [&] { pass(true); });
    const Timing c = best_of(1, pass_bf16);
    if (a.cpu_seconds < ours.cpu_seconds) ours = a;
    if (b.cpu_seconds < blas.cpu_seconds) blas = b;
    if (c.cpu_seconds < ours16.cpu_seconds) ours16 = c;
  }
  const double ours_gbs = bytes / ours.cpu_seconds / 1e9, blas_gbs = bytes / blas.cpu_seconds / 1e9;
  // The bf16 pass streams half the bytes of the same matrices: its speedup is the time ratio.
  const double bf16_gbs = bytes / 2 / ours16.cpu_seconds / 1e9;
  return {{"weights_mb", bytes / 1e6},
          {"gemv_forward_gb_per_s", ours_gbs},
          {"openblas_sgemv_gb_per_s", blas_gbs},
          {"speedup_over_openblas", ours_gbs / blas_gbs},
          {"gemv_forward_bf16_weights_mb", bytes / 2 / 1e6},
          {"gemv_forward_bf16_gb_per_s", bf16_gbs},
          {"speedup_bf16_over_fp32", ours.cpu_seconds / ours16.cpu_seconds},
          {"bf16_target_speedup", 1.8},
          {"bf16_meets_target", ours.cpu_seconds / ours16.cpu_seconds >= 1.8}};
}

json decode_attention() {
  json cases = json::array();
  cases.push_back(decode_attention_case(32768, 1, 20));
  cases.push_back(decode_attention_case(32768, 4, 5));
  cases.push_back(decode_attention_case(131072, 1, 5));
  return {{"shape", {{"batch", 1}, {"heads_q", 8}, {"heads_kv", 2}, {"head_dim", 32}}},
          {"kernel", "single_query_attention against attention_forward at seq_q = 1"},
          {"cases", cases}};
}

// ---- bf16 row and elementwise ops ----

// One op at one dtype mix: tensors of `shapes` (the op's views, in order) with dtypes `dtypes`,
// filled with N(0, 1) (nu with its square, > 0), and the bytes the op streams.
struct RowOpRun {
  std::vector<maxctx::Tensor> tensors;
  double bytes = 0;
};

RowOpRun row_op_tensors(const std::vector<maxctx::Shape>& shapes,
                        const std::vector<maxctx::DType>& dtypes) {
  const auto& kernels = maxctx::kernels::backend(maxctx::Device::kCpu);
  RowOpRun run;
  for (size_t i = 0; i < shapes.size(); ++i) {
    maxctx::Tensor t = kernels.empty(shapes[i], dtypes[i]);
    std::vector<float> values = normal(shapes[i].numel(), "row_ops");
    for (float& v : values) v = v * v + 0.5f;  // positive: rstd, nu, weights
    kernels.copy(t.view(), maxctx::TensorView::of(values.data(), shapes[i].numel()));
    run.bytes += double(t.view().bytes());
    run.tensors.push_back(std::move(t));
  }
  return run;
}

// Milliseconds and GB/s of `op` over f32 views and over the bf16 mix the model uses.
json row_op(const std::vector<maxctx::Shape>& shapes, const std::vector<maxctx::DType>& bf16_mix,
            const std::function<void(const std::vector<maxctx::Tensor>&)>& op) {
  const std::vector<maxctx::DType> all_f32(shapes.size(), maxctx::DType::kF32);
  json result;
  double seconds[2];
  for (int m = 0; m < 2; ++m) {
    const RowOpRun run = row_op_tensors(shapes, m == 0 ? all_f32 : bf16_mix);
    op(run.tensors);  // warm-up: page faults
    const Timing t = best_of(5, [&] { op(run.tensors); });
    seconds[m] = t.cpu_seconds;
    const char* key = m == 0 ? "f32" : "bf16";
    result[key] = {{"ms", 1e3 * t.cpu_seconds}, {"gb_per_s", run.bytes / t.cpu_seconds / 1e9}};
  }
  result["speedup_bf16_over_f32"] = seconds[0] / seconds[1];
  return result;
}

// The model's mixes at one layer of N = 4096 tokens, E = 1024, F = 2816, 8 heads of 128:
// activations bf16, statistics and parameter gradients f32, bf16 parameters and moments.
json bf16_row_ops() {
  using maxctx::DType;
  using maxctx::Shape;
  constexpr DType f = DType::kF32, b = DType::kBF16;
  const auto& k = maxctx::kernels::backend(maxctx::Device::kCpu);
  const int64_t N = 4096, E = 1024, F = 2816, H = 8, Dh = 128, P = 4 * 1024 * 1024;
  const Shape ne{N, E}, nf{N, F}, qk{N, H, Dh}, cs{N, Dh / 2}, n{N}, e{E}, p{P};
  using Ts = std::vector<maxctx::Tensor>;
  auto v = [](const Ts& t, size_t i) { return t[i].view(); };
  json r;
  r["swiglu_forward"] = row_op({nf, nf, nf}, {b, b, b},
                               [&](const Ts& t) { k.swiglu_forward(v(t, 0), v(t, 1), v(t, 2)); });
  r["swiglu_backward"] = row_op({nf, nf, nf, nf, nf}, {f, f, b, b, b}, [&](const Ts& t) {
    k.swiglu_backward(v(t, 0), v(t, 1), v(t, 2), v(t, 3), v(t, 4));
  });
  r["rmsnorm_forward"] = row_op({ne, n, ne, e}, {b, f, b, f}, [&](const Ts& t) {
    k.rmsnorm_forward(v(t, 0), v(t, 1), v(t, 2), v(t, 3), 1e-5f);
  });
  r["rmsnorm_backward"] = row_op({ne, e, ne, ne, e, n}, {f, f, f, b, f, f}, [&](const Ts& t) {
    k.rmsnorm_backward(v(t, 0), v(t, 1), v(t, 2), v(t, 3), v(t, 4), v(t, 5));
  });
  r["rope_forward_in_place"] = row_op({qk, cs, cs}, {b, f, f}, [&](const Ts& t) {
    k.rope_forward(v(t, 0), v(t, 0), v(t, 1), v(t, 2));
  });
  r["add_residual"] =
      row_op({ne, ne, ne}, {b, b, f}, [&](const Ts& t) { k.add(v(t, 0), v(t, 1), v(t, 2)); });
  r["adamw_update"] = row_op({p, p, p, p}, {b, f, b, b}, [&](const Ts& t) {
    k.adamw_update(v(t, 0), v(t, 1), v(t, 2), v(t, 3),
                   {0.9f, 0.95f, 0.1f, 0.05f, 1e-8f, 0.0f, 0.1f, 1e-3f, 0.1f, 0.05f});
  });
  std::vector<int32_t> tokens(N);
  for (int64_t i = 0; i < N; ++i) tokens[i] = int32_t((i * 7919) % 32000);
  r["embedding_forward"] = row_op({ne, Shape{32000, E}}, {b, b}, [&](const Ts& t) {
    k.embedding_forward(v(t, 0), tokens.data(), v(t, 1));
  });
  return {{"shape", {{"tokens", N}, {"embed", E}, {"ffn", F}, {"heads", H}, {"head_dim", Dh}}},
          {"note", "bytes: every view once (the table for embedding); bf16 mixes as the model"},
          {"ops", r}};
}

}  // namespace

int main(int argc, char** argv) {
  std::string out_path = "kernels.json", torch_path, only;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    if (flag == "--out") out_path = argv[i + 1];
    if (flag == "--torch-json") torch_path = argv[i + 1];
    if (flag == "--only") only = argv[i + 1];  // one section's key, e.g. decode_attention
  }
  json result;
  result["load_average_1min_at_start"] = load_average();
  const double peak = fma_peak_gflops();
  result["fma_peak_gflops"] = peak;
  result["fma_chains"] = maxctx::bench::kFmaChains;
  result["fma_target"] = maxctx::bench::fma_target_name();
  result["fma_vector_lanes_f32"] = maxctx::bench::fma_vector_lanes();
  result["attention_simd_target"] = maxctx::kernels::cpu::attention_simd_target();
  // The bf16 peaks, measured once (fma_peak.h's probes) for every section that reports them.
  const double bf16_peak = dpbf16_peak_gflops();
  result["dpbf16_peak_gflops"] = bf16_peak;
  const double amx_peak = amx_peak_gflops();
  result["amx_peak_gflops"] = amx_peak;
  const std::pair<const char*, std::function<json()>> sections[] = {
      {"sgemm_1024", [&] { return gemm_product(1024, 1024, 1024, false, false, 7, peak); }},
      {"sgemm_model_products", [&] { return model_products(peak); }},
      {"bf16_gemm", [&] { return bf16_gemm(peak, bf16_peak, amx_peak); }},
      {"tile_products", [&] { return tile_products(peak); }},
      {"attention_causal", [&] { return attention(peak, torch_path); }},
      {"decode_attention", [] { return decode_attention(); }},
      {"gemv", [] { return gemv(); }},
      {"bf16_row_ops", [] { return bf16_row_ops(); }},
      {"attention_bf16", [&] { return maxctx::bench::attention_bf16(peak, bf16_peak, amx_peak); }},
      {"decode_attention_bf16", [] { return maxctx::bench::decode_attention_bf16(); }},
  };
  for (const auto& [name, run] : sections) {
    if (only.empty() || only == name) result[name] = run();
  }
  result["load_average_1min_at_end"] = load_average();
  std::ofstream(out_path) << result.dump(2) << "\n";
  std::printf("%s\n", result.dump(2).c_str());
  return 0;
}

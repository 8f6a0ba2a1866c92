#include "kernels/attention_bf16_bench.h"

#include <time.h>

#include <algorithm>
#include <cstdio>
#include <functional>
#include <vector>

#include "maxctx/core/dtype.h"
#include "maxctx/core/rng.h"
#include "maxctx/kernels/cpu/attention.h"
#include "maxctx/kernels/cpu/attention_tiles.h"
#include "maxctx/kernels/cpu/single_query_attention.h"

namespace maxctx::bench {
namespace {

using kernels::AttentionParams;
using nlohmann::json;
namespace cpu = kernels::cpu;

// The least process CPU time of `reps` runs of body.
double best_cpu_seconds(int reps, const std::function<void()>& body) {
  auto now = [] {
    timespec t{};
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
    return static_cast<double>(t.tv_sec) + 1e-9 * static_cast<double>(t.tv_nsec);
  };
  double best = 1e30;
  for (int r = 0; r < reps; ++r) {
    const double start = now();
    body();
    best = std::min(best, now() - start);
  }
  return best;
}

std::vector<float> draw(int64_t n, const char* stream) {
  std::vector<float> x(static_cast<size_t>(n));
  rng::fill_normal(x, 4321, rng::stream_id(stream), 0, 0.0f, 1.0f);
  return x;
}

std::vector<bf16> rounded(const std::vector<float>& x) {
  std::vector<bf16> out(x.size());
  convert_f32_to_bf16(x, out);
  return out;
}

AttentionParams model_heads(int64_t seq_q, int64_t seq_k) {  // maxctx-20m
  AttentionParams p;
  p.seq_q = seq_q;
  p.seq_k = seq_k;
  p.heads_q = 8;
  p.heads_kv = 2;
  p.head_dim = 64;
  return p;
}

}  // namespace

json attention_bf16(double fma_peak_gflops, double dpbf16_peak, double amx_peak) {
  const AttentionParams p = model_heads(8192, 8192);
  const int64_t q_numel = p.seq_q * p.heads_q * p.head_dim;
  const int64_t kv_numel = p.seq_k * p.heads_kv * p.head_dim;
  const auto q = draw(q_numel, "q"), k = draw(kv_numel, "k"), v = draw(kv_numel, "v"),
             d_out = draw(q_numel, "d_out");
  const auto q16 = rounded(q), k16 = rounded(k), v16 = rounded(v), d_out16 = rounded(d_out);
  std::vector<float> out(q.size()), lse(static_cast<size_t>(p.heads_q * p.seq_q)), dq(q.size()),
      dk(k.size()), dv(v.size());
  std::vector<bf16> out16(q.size());
  std::vector<int32_t> pos(static_cast<size_t>(p.seq_q)), seg(pos.size(), 0);
  for (size_t i = 0; i < pos.size(); ++i) pos[i] = static_cast<int32_t>(i);
  const int32_t* m = pos.data();
  const int32_t* s = seg.data();
  const int reps = 2;
  const double f32_fwd = best_cpu_seconds(reps, [&] {
    cpu::attention_forward(out.data(), lse.data(), q.data(), k.data(), v.data(), m, s, m, s, p);
  });
  const double f32_bwd = best_cpu_seconds(reps, [&] {
    cpu::attention_backward(dq.data(), dk.data(), dv.data(), d_out.data(), out.data(), lse.data(),
                            q.data(), k.data(), v.data(), m, s, m, s, p);
  });
  const double bf16_fwd = best_cpu_seconds(reps, [&] {
    cpu::attention_forward_bf16(out16.data(), lse.data(), q16.data(), k16.data(), v16.data(), m, s,
                                m, s, p);
  });
  const double bf16_bwd = best_cpu_seconds(reps, [&] {
    cpu::attention_backward_bf16(dq.data(), dk.data(), dv.data(), d_out16.data(), out16.data(),
                                 lse.data(), q16.data(), k16.data(), v16.data(), m, s, m, s, p);
  });
  // Useful work as kernels_bench counts it: causal forward 2·S²·D·Hq, backward 2.5 times that.
  const double fwd_flops =
      2.0 * static_cast<double>(p.seq_q * p.seq_k) * static_cast<double>(p.head_dim * p.heads_q);
  auto rates = [&](double fwd, double bwd, double peak) {
    const double total = fwd + bwd, flops = 3.5 * fwd_flops;
    return json{{"forward_seconds", fwd},
                {"backward_seconds", bwd},
                {"forward_backward_seconds", total},
                {"forward_gflops", fwd_flops / fwd / 1e9},
                {"backward_gflops", 2.5 * fwd_flops / bwd / 1e9},
                {"forward_backward_gflops", flops / total / 1e9},
                {"peak_gflops", peak},
                {"forward_backward_fraction_of_peak", flops / total / 1e9 / peak}};
  };
  const double speedup = (f32_fwd + f32_bwd) / (bf16_fwd + bf16_bwd);
  const bool amx = cpu::attention_bf16_amx();
  return {{"shape",
           {{"seq", p.seq_q},
            {"heads_q", p.heads_q},
            {"heads_kv", p.heads_kv},
            {"head_dim", p.head_dim},
            {"mask", "causal"},
            {"model", "maxctx-20m"}}},
          {"bf16_products", amx ? "amx (TDPBF16PS)" : "portable"},
          {"f32", rates(f32_fwd, f32_bwd, fma_peak_gflops)},
          {"bf16", rates(bf16_fwd, bf16_bwd, amx ? amx_peak : fma_peak_gflops)},
          {"bf16_speedup_forward", f32_fwd / bf16_fwd},
          {"bf16_speedup_backward", f32_bwd / bf16_bwd},
          {"bf16_speedup_forward_backward", speedup},
          {"vdpbf16ps_peak_gflops", dpbf16_peak},
          {"vdpbf16ps_peak_over_fma_peak", dpbf16_peak / fma_peak_gflops},
          {"amx_bf16_peak_gflops", amx_peak},
          {"amx_peak_over_fma_peak", amx_peak / fma_peak_gflops},
          {"target_speedup", 1.6},
          {"meets_target", speedup >= 1.6}};
}

json decode_attention_bf16() {
  json cases = json::array();
  for (const int64_t seq_k : {int64_t{32768}, int64_t{131072}}) {
    AttentionParams p = model_heads(1, seq_k);
    const int64_t kv_numel = seq_k * p.heads_kv * p.head_dim;
    const auto q = draw(p.heads_q * p.head_dim, "decode_q");
    const auto k = draw(kv_numel, "decode_k"), v = draw(kv_numel, "decode_v");
    const auto k16 = rounded(k), v16 = rounded(v);
    std::vector<float> out(q.size()), lse(static_cast<size_t>(p.heads_q));
    std::vector<int32_t> k_pos(static_cast<size_t>(seq_k)), k_seg(k_pos.size(), 0);
    for (size_t i = 0; i < k_pos.size(); ++i) k_pos[i] = static_cast<int32_t>(i);
    const int32_t q_pos = static_cast<int32_t>(seq_k - 1), q_seg = 0;
    constexpr int kCalls = 10;
    auto per_call = [&](const std::function<void()>& call) {
      return best_cpu_seconds(3,
                              [&] {
                                for (int c = 0; c < kCalls; ++c) call();
                              }) /
             kCalls;
    };
    const double f32 = per_call([&] {
      cpu::single_query_attention(out.data(), lse.data(), q.data(), k.data(), v.data(), &q_pos,
                                  &q_seg, k_pos.data(), k_seg.data(), p);
    });
    const double bf16_cache = per_call([&] {
      cpu::single_query_attention(out.data(), lse.data(), q.data(), k16.data(), v16.data(), &q_pos,
                                  &q_seg, k_pos.data(), k_seg.data(), p);
    });
    const double f32_bytes = 2.0 * static_cast<double>(kv_numel) * sizeof(float);
    cases.push_back({{"seq_k", seq_k},
                     {"f32_cache_seconds_per_call", f32},
                     {"bf16_cache_seconds_per_call", bf16_cache},
                     {"f32_cache_gb_per_s", f32_bytes / f32 / 1e9},
                     {"bf16_cache_gb_per_s", f32_bytes / 2 / bf16_cache / 1e9},
                     {"bf16_speedup", f32 / bf16_cache}});
  }
  return {{"shape", {{"batch", 1}, {"heads_q", 8}, {"heads_kv", 2}, {"head_dim", 64}}},
          {"note", "one cache per call, warm from the previous call where it fits in L3"},
          {"cases", cases}};
}

}  // namespace maxctx::bench

// Flash attention on the GPU (kernels/cuda/flash_attention.h): forward, backward and
// forward+backward TFLOP/s at the shape (bf16, 32 query / 8 kv heads, D = 128, causal,
// batch 1) for S = 8192 and 32768, timed with CUDA events after warm-up. Prints one JSON object
// on stdout (scripts/gpu-check.sh puts it beside torch's scaled_dot_product_attention).
//
// FLOPs are counted as FlashAttention's benchmark counts them: forward 4·B·H·S²·D, halved for
// the causal mask; backward 2.5× the forward; forward+backward 3.5× the forward. Each figure
// names its factor in the JSON.
//
// Usage: attention_bench [--seq 8192,32768] [--warmup 2] [--iters 10] [--backward-iters 3]
#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <nlohmann/json.hpp>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "maxctx/core/dtype.h"
#include "maxctx/kernels/cuda/flash_attention.h"

namespace {

using maxctx::DType;
using maxctx::Shape;
using maxctx::TensorView;
using maxctx::kernels::AttentionParams;
using maxctx::kernels::AttentionStats;

void check(cudaError_t status, const char* what) {
  if (status != cudaSuccess) {
    throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(status));
  }
}

struct DeviceBuffer {
  explicit DeviceBuffer(size_t size) : bytes(size) { check(cudaMalloc(&data, size), "cudaMalloc"); }
  ~DeviceBuffer() { cudaFree(data); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  TensorView view(DType dtype) const {
    return TensorView(data, dtype, Shape{static_cast<int64_t>(bytes / maxctx::dtype_size(dtype))},
                      maxctx::Device::kCuda);
  }
  void* data = nullptr;
  size_t bytes;
};

template <typename T>
void upload(DeviceBuffer& dst, const std::vector<T>& host) {
  check(cudaMemcpy(dst.data, host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice),
        "cudaMemcpy");
}

std::vector<maxctx::bf16> random_bf16(size_t n, std::mt19937& rng) {
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<maxctx::bf16> v(n);
  for (auto& x : v) x = maxctx::float_to_bf16(dist(rng));
  return v;
}

// Mean milliseconds of `iters` calls of f after `warmup` calls, timed with events on stream 0.
template <typename F>
double time_ms(int warmup, int iters, F&& f) {
  for (int i = 0; i < warmup; ++i) f();
  cudaEvent_t start, stop;
  check(cudaEventCreate(&start), "cudaEventCreate");
  check(cudaEventCreate(&stop), "cudaEventCreate");
  check(cudaEventRecord(start, nullptr), "cudaEventRecord");
  for (int i = 0; i < iters; ++i) f();
  check(cudaEventRecord(stop, nullptr), "cudaEventRecord");
  check(cudaEventSynchronize(stop), "cudaEventSynchronize");
  float ms = 0;
  check(cudaEventElapsedTime(&ms, start, stop), "cudaEventElapsedTime");
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  return static_cast<double>(ms) / iters;
}

nlohmann::json bench_one(int64_t seq, int warmup, int iters, int backward_iters) {
  AttentionParams p;
  p.batch = 1;
  p.seq_q = p.seq_k = seq;
  p.heads_q = 32;
  p.heads_kv = 8;
  p.head_dim = 128;
  const auto q_elems = static_cast<size_t>(p.batch * seq * p.heads_q * p.head_dim);
  const auto kv_elems = static_cast<size_t>(p.batch * seq * p.heads_kv * p.head_dim);
  const auto rows = static_cast<size_t>(p.batch * p.heads_q * seq);
  std::mt19937 rng(5);
  DeviceBuffer q(q_elems * 2), k(kv_elems * 2), v(kv_elems * 2), out(q_elems * 2),
      d_out(q_elems * 2), lse(rows * 4), dq(q_elems * 4), dk(kv_elems * 4), dv(kv_elems * 4),
      pos(static_cast<size_t>(seq) * 4), seg(static_cast<size_t>(seq) * 4);
  upload(q, random_bf16(q_elems, rng));
  upload(k, random_bf16(kv_elems, rng));
  upload(v, random_bf16(kv_elems, rng));
  upload(d_out, random_bf16(q_elems, rng));
  std::vector<int32_t> positions(static_cast<size_t>(seq));
  for (int64_t i = 0; i < seq; ++i) positions[static_cast<size_t>(i)] = static_cast<int32_t>(i);
  upload(pos, positions);
  check(cudaMemset(seg.data, 0, seg.bytes), "cudaMemset");
  check(cudaMemset(dq.data, 0, dq.bytes), "cudaMemset");
  check(cudaMemset(dk.data, 0, dk.bytes), "cudaMemset");
  check(cudaMemset(dv.data, 0, dv.bytes), "cudaMemset");
  const auto* ip = static_cast<const int32_t*>(pos.data);
  const auto* is = static_cast<const int32_t*>(seg.data);

  const auto forward = [&] {
    maxctx::kernels::cuda::flash_attention_forward(
        out.view(DType::kBF16), lse.view(DType::kF32), q.view(DType::kBF16), k.view(DType::kBF16),
        v.view(DType::kBF16), ip, is, ip, is, p, nullptr, nullptr);
  };
  const auto backward = [&] {
    maxctx::kernels::cuda::flash_attention_backward(
        dq.view(DType::kF32), dk.view(DType::kF32), dv.view(DType::kF32), d_out.view(DType::kBF16),
        out.view(DType::kBF16), lse.view(DType::kF32), q.view(DType::kBF16), k.view(DType::kBF16),
        v.view(DType::kBF16), ip, is, ip, is, p, nullptr, nullptr);
  };
  const double fwd_ms = time_ms(warmup, iters, forward);
  const double bwd_ms = time_ms(1, backward_iters, backward);
  const double fwd_bwd_ms = time_ms(1, backward_iters, [&] {
    forward();
    backward();
  });
  AttentionStats stats;
  maxctx::kernels::cuda::flash_attention_forward(
      out.view(DType::kBF16), lse.view(DType::kF32), q.view(DType::kBF16), k.view(DType::kBF16),
      v.view(DType::kBF16), ip, is, ip, is, p, &stats, nullptr);
  check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");

  const double fwd_flop = 4.0 * p.batch * p.heads_q * static_cast<double>(seq) * seq * p.head_dim /
                          2.0;  // causal: half the score matrix
  const auto tflops = [](double flop, double ms) { return flop / (ms * 1e-3) / 1e12; };
  return {{"seq", seq},
          {"forward_ms", fwd_ms},
          {"forward_tflops", tflops(fwd_flop, fwd_ms)},
          {"backward_ms", bwd_ms},
          {"backward_tflops", tflops(2.5 * fwd_flop, bwd_ms)},
          {"fwd_bwd_ms", fwd_bwd_ms},
          {"fwd_bwd_tflops", tflops(3.5 * fwd_flop, fwd_bwd_ms)},
          {"forward_tiles_computed", stats.blocks_computed},
          {"forward_tiles_skipped", stats.blocks_skipped}};
}

std::vector<int64_t> parse_list(const char* text) {
  std::vector<int64_t> values;
  std::string s(text);
  size_t start = 0;
  while (start <= s.size()) {
    const size_t comma = s.find(',', start);
    values.push_back(std::stoll(s.substr(start, comma - start)));
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return values;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<int64_t> seqs = {8192, 32768};
  int warmup = 2, iters = 10, backward_iters = 3;
  try {
    for (int i = 1; i < argc; ++i) {
      const std::string arg = argv[i];
      if (i + 1 >= argc) throw std::runtime_error("missing value after " + arg);
      const char* value = argv[++i];
      if (arg == "--seq") {
        seqs = parse_list(value);
      } else if (arg == "--warmup") {
        warmup = std::stoi(value);
      } else if (arg == "--iters") {
        iters = std::stoi(value);
      } else if (arg == "--backward-iters") {
        backward_iters = std::stoi(value);
      } else {
        throw std::runtime_error("unknown argument " + arg +
                                 " (--seq, --warmup, --iters, --backward-iters)");
      }
    }
    if (iters < 1 || backward_iters < 1 || warmup < 0) {
      throw std::runtime_error("--iters and --backward-iters must be >= 1, --warmup >= 0");
    }
    int device = 0;
    check(cudaGetDevice(&device), "cudaGetDevice");
    cudaDeviceProp prop{};
    check(cudaGetDeviceProperties(&prop, device), "cudaGetDeviceProperties");
    nlohmann::json report = {
        {"benchmark", "cuda_flash_attention"},
        {"kernel", "portable mma.sync (sm_80+) forward, FFMA backward"},
        {"device", prop.name},
        {"dtype", "bf16"},
        {"batch", 1},
        {"heads_q", 32},
        {"heads_kv", 8},
        {"head_dim", 128},
        {"causal", true},
        {"flop_counting",
         "FlashAttention's: forward 4*B*H*S^2*D/2 (causal), backward 2.5x, fwd+bwd 3.5x"},
        {"warmup", warmup},
        {"iters", iters},
        {"backward_iters", backward_iters},
        {"results", nlohmann::json::array()}};
    for (int64_t seq : seqs)
      report["results"].push_back(bench_one(seq, warmup, iters, backward_iters));
    std::printf("%s\n", report.dump().c_str());
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "attention_bench: %s\n", e.what());
    return 1;
  }
}

#include "cli/probe_detail.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <vector>

#include "maxctx/core/check.h"
#include "maxctx/core/dtype.h"
#include "maxctx/kernels/host_transfer.h"
#include "maxctx/parallel/sharded_parameters.h"
#include "maxctx/plan/inference_work.h"
#include "maxctx/plan/step_work.h"
#include "maxctx/train/batch.h"
#include "maxctx/train/optimizer.h"
#include "maxctx/train/recall.h"

namespace maxctx::cli {
namespace {

constexpr int64_t kTokens = 2048;  // a training micro-batch's rows

// A tensor of pseudo-random values in [0.01, 1): operands as a run has them (all-zero operands
// let the chip run cooler and faster than it runs on real data).
Tensor operand(const kernels::Kernels& k, Shape shape, DType dtype = DType::kF32) {
  Tensor values = k.empty(shape);
  std::vector<float> host(static_cast<size_t>(values.numel()));
  uint32_t state = 12345;
  for (float& x : host) {
    state = state * 1664525u + 1013904223u;
    x = 0.01f + 0.99f * static_cast<float>(state >> 8) / 16777216.0f;
  }
  kernels::upload_floats(k, values.view(), host);
  if (dtype == DType::kF32) return values;
  Tensor t = k.empty(std::move(shape), dtype);
  k.copy(t.view(), values.view());
  return t;
}

// (2048, d) x (d, 2d): forward (2·N·d·2d FLOPs) or input + weight gradients (twice that).
double measure_matmul(const kernels::Kernels& k, const Communicator& world, DType dtype, int64_t d,
                      bool backward) {
  const int64_t N = kTokens, K = d, M = 2 * d;
  Tensor in = operand(k, {N, K}, dtype), w = operand(k, {M, K}, dtype), out = operand(k, {N, M});
  const int repeats = d <= 256 ? 9 : 5;
  if (!backward) {
    const double s =
        timed_kernel(world, repeats, [&] { k.matmul_forward(out.view(), in.view(), w.view()); });
    return 2.0 * double(N * K * M) / s;
  }
  Tensor d_in = operand(k, {N, K}), d_w = operand(k, {M, K});
  const double s = timed_kernel(world, repeats, [&] {
    k.matmul_backward(d_in.view(), d_w.view(), out.view(), in.view(), w.view());
  });
  return 4.0 * double(N * K * M) / s;
}

double measure_int8_matmul(const kernels::Kernels& k, const Communicator& world, int64_t d) {
  const int64_t N = kTokens, K = d, M = 2 * d;
  Tensor in = operand(k, {N, K}), w = operand(k, {M, K}), out = operand(k, {N, M});
  const kernels::Int8Weights packed = k.int8_pack_weights(w.view());
  kernels::Int8Rows rows;
  k.int8_quantize_rows(rows, in.view());
  const double s = timed_kernel(world, 5, [&] { k.int8_matmul_forward(out.view(), rows, packed); });
  return 2.0 * double(N * K * M) / s;
}

// Causal attention at S 2048, 8 query and 4 KV heads of `head_dim`: the forward alone (a
// prefill's) or forward + backward (a training step's), counted as MaxText counts it
// (4·S²·Hq·D/2 forward, x3 with the backward).
double measure_attention(const kernels::Kernels& k, const Communicator& world, DType dtype,
                         int64_t head_dim, bool backward) {
  kernels::AttentionParams p;
  p.batch = 1;
  p.seq_q = p.seq_k = kTokens;
  p.heads_q = 8;
  p.heads_kv = 4;
  p.head_dim = head_dim;
  const int64_t nq = p.seq_q * p.heads_q * head_dim, nk = p.seq_k * p.heads_kv * head_dim;
  Tensor q = operand(k, {nq}, dtype), kk = operand(k, {nk}, dtype), v = operand(k, {nk}, dtype),
         out = operand(k, {nq}, dtype), d_out = operand(k, {nq}),
         lse = operand(k, {p.heads_q * p.seq_q}), dq = operand(k, {nq}), dk = operand(k, {nk}),
         dv = operand(k, {nk});
  std::vector<int32_t> pos(static_cast<size_t>(p.seq_q)), seg(pos.size(), 1);
  for (size_t i = 0; i < pos.size(); ++i) pos[i] = static_cast<int32_t>(i);
  const kernels::DeviceIndices positions(k, pos), segments(k, seg);
  const double s = timed_kernel(world, 3, [&] {
    k.attention_forward(out.view(), lse.view(), q.view(), kk.view(), v.view(), positions.data(),
                        segments.data(), positions.data(), segments.data(), p, nullptr);
    if (!backward) return;
    k.attention_backward(dq.view(), dk.view(), dv.view(), d_out.view(), out.view(), lse.view(),
                         q.view(), kk.view(), v.view(), positions.data(), segments.data(),
                         positions.data(), segments.data(), p, nullptr);
  });
  return (backward ? 3.0 : 1.0) * 4.0 * double(p.seq_q * p.seq_k * p.heads_q * head_dim) / 2 / s;
}

// How many copies of `bytes` of operands a decode-step timing cycles through: enough to spill
// the caches (32 MiB), so that each call reads its operands from memory as a step does (a step
// reads every weight and its whole KV cache once); a single copy would stay cache-hot.
int64_t cold_copies(int64_t bytes) {
  return std::clamp<int64_t>((int64_t{32} << 20) / std::max<int64_t>(1, bytes), 1, 256);
}

// A decode step's matmul, (rows, inner) x (inner, cols): the mean seconds of one call, the
// weights cold (cold_copies) or, `cached`, one copy that stays in the caches between calls;
// `int8`: quantization=int8's codes, the rows quantized first as the forward does.
double time_decode_matmul(const kernels::Kernels& k, const Communicator& world,
                          const std::string& kind, int64_t rows, int64_t inner, int64_t cols,
                          bool cached) {
  Tensor in = operand(k, {rows, inner}), out = operand(k, {rows, cols});
  const bool int8 = kind == "int8";
  const DType dtype = int8 ? DType::kF32 : parse_dtype(kind);
  const int64_t copies =
      cached ? 1 : cold_copies(cols * inner * (int8 ? 1 : int64_t(dtype_size(dtype))));
  std::vector<Tensor> weights;
  std::vector<kernels::Int8Weights> packed;
  for (int64_t c = 0; c < copies; ++c) {
    Tensor w = operand(k, {cols, inner}, dtype);
    if (int8) {
      packed.push_back(k.int8_pack_weights(w.view()));
    } else {
      weights.push_back(std::move(w));
    }
  }
  int64_t next = 0;
  if (int8) {
    kernels::Int8Rows quantized;
    return timed_kernel(world, 20, [&] {
      k.int8_quantize_rows(quantized, in.view());
      k.int8_matmul_forward(out.view(), quantized, packed[next++ % copies]);
    });
  }
  Tensor typed_in = operand(k, {rows, inner}, dtype);
  return timed_kernel(world, 20, [&] {
    k.matmul_forward(out.view(), typed_in.view(), weights[next++ % copies].view());
  });
}

// A decode step's attention: 4 slots' single queries (8 query and 4 KV heads) over 1024 cache
// rows each, on a cache of `cache` ("int8": codes and a scale per row, else the dtype), cold
// (cold_copies) or `cached` (one copy, resident between calls); FLOPs 4·rows·Hq·D per slot (QKᵀ
// and PV).
double measure_decode_attention(const kernels::Kernels& k, const Communicator& world,
                                const std::string& cache, int64_t head_dim, bool cached) {
  kernels::AttentionParams p;
  p.batch = 4;
  p.seq_q = 1;
  p.seq_k = 1024;
  p.heads_q = 8;
  p.heads_kv = 4;
  p.head_dim = head_dim;
  const Shape q_shape{p.batch, 1, p.heads_q, head_dim};
  const Shape kv_shape{p.batch, p.seq_k, p.heads_kv, head_dim};
  Tensor q = operand(k, q_shape), out = operand(k, q_shape),
         lse = operand(k, {p.batch * p.heads_q});
  std::vector<int32_t> k_pos(static_cast<size_t>(p.batch * p.seq_k)), k_seg(k_pos.size(), 1);
  for (size_t i = 0; i < k_pos.size(); ++i) k_pos[i] = static_cast<int32_t>(i % p.seq_k);
  const std::vector<int32_t> q_pos(static_cast<size_t>(p.batch), static_cast<int32_t>(p.seq_k)),
      q_seg(q_pos.size(), 1);
  const kernels::DeviceIndices qp(k, q_pos), qs(k, q_seg), kp(k, k_pos), ks(k, k_seg);
  const double flops = 4.0 * double(p.batch * p.seq_k * p.heads_q * head_dim);
  if (cache == "int8") {
    // Codes and a scale per row, as many caches as spill the caches (a step reads each layer's).
    struct Int8Cache {
      Tensor k_codes, k_scale, v_codes, v_scale;
    };
    const int64_t copies = cached ? 1 : cold_copies(2 * kv_shape.numel());
    std::vector<Int8Cache> caches;
    Tensor kf = operand(k, kv_shape), vf = operand(k, kv_shape);
    for (int64_t c = 0; c < copies; ++c) {
      Int8Cache copy{k.empty(kv_shape, DType::kI8), operand(k, {p.batch * p.seq_k}),
                     k.empty(kv_shape, DType::kI8), operand(k, {p.batch * p.seq_k})};
      k.quantize_rows_int8(copy.k_codes.view(), copy.k_scale.view(), kf.view(),
                           kernels::kInt8KvLevels);
      k.quantize_rows_int8(copy.v_codes.view(), copy.v_scale.view(), vf.view(),
                           kernels::kInt8KvLevels);
      caches.push_back(std::move(copy));
    }
    int64_t next = 0;
    return flops / timed_kernel(world, 20, [&] {
             const Int8Cache& c = caches[next++ % copies];
             k.single_query_attention_int8(out.view(), lse.view(), q.view(), c.k_codes.view(),
                                           c.k_scale.view(), c.v_codes.view(), c.v_scale.view(),
                                           qp.data(), qs.data(), kp.data(), ks.data(), p);
           });
  }
  const DType dtype = parse_dtype(cache);
  const int64_t copies =
      cached ? 1 : cold_copies(2 * kv_shape.numel() * int64_t(dtype_size(dtype)));
  std::vector<Tensor> keys, values;
  for (int64_t c = 0; c < copies; ++c) {
    keys.push_back(operand(k, kv_shape, dtype));
    values.push_back(operand(k, kv_shape, dtype));
  }
  int64_t next = 0;
  return flops / timed_kernel(world, 20, [&] {
           const int64_t c = next++ % copies;
           k.single_query_attention(out.view(), lse.view(), q.view(), keys[c].view(),
                                    values[c].view(), qp.data(), qs.data(), kp.data(), ks.data(),
                                    p);
         });
}

// Elements per second of each vector kernel of plan::training_vector_ops() (forward + backward) and
// of plan::inference_vector_ops() (the forward alone, and the int8 quantizers), on the same
// operands: 2048 tokens of width 1024, a vocabulary of 8192, 4M parameters.
std::map<std::string, double> measure_vector_kernels(const kernels::Kernels& k,
                                                     const Communicator& world) {
  const int64_t N = kTokens, W = 1024, V = 8192, P = int64_t{4} << 20;
  const double rows = double(N * W);
  Tensor a = operand(k, {N, W}), b = operand(k, {N, W}), c = operand(k, {N, W}),
         d = operand(k, {N, W}), e = operand(k, {N, W}), weight = operand(k, {W}),
         d_weight = operand(k, {W}), rstd = operand(k, {N});
  std::vector<int32_t> host_tokens(static_cast<size_t>(N));
  for (size_t i = 0; i < host_tokens.size(); ++i) host_tokens[i] = static_cast<int32_t>(i * 7 % V);
  const kernels::DeviceIndices tokens(k, host_tokens);
  std::map<std::string, double> rates;
  rates["rmsnorm_forward"] =
      rows / timed_kernel(world, 5, [&] {
        k.rmsnorm_forward(b.view(), rstd.view(), a.view(), weight.view(), 1e-5f);
      });
  rates["rmsnorm"] = rows / timed_kernel(world, 5, [&] {
                       k.rmsnorm_forward(b.view(), rstd.view(), a.view(), weight.view(), 1e-5f);
                       k.rmsnorm_backward(c.view(), d_weight.view(), b.view(), a.view(),
                                          weight.view(), rstd.view());
                     });
  rates["swiglu_forward"] =
      rows / timed_kernel(world, 5, [&] { k.swiglu_forward(c.view(), a.view(), b.view()); });
  rates["swiglu"] = rows / timed_kernel(world, 5, [&] {
                      k.swiglu_forward(c.view(), a.view(), b.view());
                      k.swiglu_backward(d.view(), e.view(), c.view(), a.view(), b.view());
                    });
  {
    // 8 + 4 heads of 64 over the same N·W elements.
    const int64_t heads = 16, D = W / heads;
    Tensor cos = operand(k, {N, D / 2}), sin = operand(k, {N, D / 2});
    const TensorView x = a.view().reshaped({N, heads, D}), y = b.view().reshaped({N, heads, D});
    rates["rope_forward"] =
        rows / timed_kernel(world, 5, [&] { k.rope_forward(y, x, cos.view(), sin.view()); });
    rates["rope"] = rows / timed_kernel(world, 5, [&] {
                      k.rope_forward(y, x, cos.view(), sin.view());
                      k.rope_backward(x, y, cos.view(), sin.view());
                    });
  }
  rates["residual_add_forward"] =
      rows / timed_kernel(world, 5, [&] { k.add(c.view(), a.view(), b.view()); });
  rates["residual_add"] = rows / timed_kernel(world, 5, [&] {
                            k.add(c.view(), a.view(), b.view());
                            k.add_inplace(d.view(), a.view());
                          });
  {
    Tensor table = operand(k, {V, W}), d_table = operand(k, {V, W});
    rates["embedding_forward"] = rows / timed_kernel(world, 5, [&] {
                                   k.embedding_forward(a.view(), tokens.data(), table.view());
                                 });
    rates["embedding"] = rows / timed_kernel(world, 5, [&] {
                           k.embedding_forward(a.view(), tokens.data(), table.view());
                           k.embedding_backward(d_table.view(), a.view(), tokens.data());
                         });
  }
  {
    Tensor logits = operand(k, {N, V}), loss = operand(k, {N}), lse = operand(k, {N}),
           weights = operand(k, {N});
    rates["cross_entropy"] = double(N * V) / timed_kernel(world, 3, [&] {
                               k.cross_entropy_forward(loss.view(), lse.view(), logits.view(),
                                                       tokens.data(), weights.view());
                               k.cross_entropy_backward(logits.view(), logits.view(), lse.view(),
                                                        tokens.data(), weights.view(), 1.0f);
                             });
    // The step's accuracy metric: the backend's arg max over every scored row's logits.
    kernels::DeviceDoubles hits;
    hits.reserve(k, 1);
    rates["accuracy"] =
        double(N * V) / timed_kernel(world, 3, [&] {
          k.count_arg_max_hits(hits.slot(0), logits.view(), tokens.data(), weights.view());
        });
  }
  {
    // Inference's int8 quantization: the KV cache's rows and the activations' (int8 weights).
    Tensor codes = k.empty({N, W}, DType::kI8), scale = operand(k, {N});
    rates["quantize_kv"] =
        rows / timed_kernel(world, 5, [&] {
          k.quantize_rows_int8(codes.view(), scale.view(), a.view(), kernels::kInt8KvLevels);
        });
    kernels::Int8Rows quantized;
    rates["quantize_rows"] =
        rows / timed_kernel(world, 5, [&] { k.int8_quantize_rows(quantized, a.view()); });
  }
  {
    Tensor params = operand(k, {P}), grads = operand(k, {P}), mu = operand(k, {P}),
           nu = operand(k, {P});
    kernels::AdamWStep step{0.9f, 0.95f, 0.1f, 0.05f, 1e-8f, 0.0f, 0.1f, 1e-4f, 0.1f, 0.05f};
    rates["adamw"] = double(P) / timed_kernel(world, 5, [&] {
                       k.adamw_update(params.view(), grads.view(), mu.view(), nu.view(), step);
                     });
    rates["grad_clip"] =
        double(P) / timed_kernel(world, 5, [&] {
          clip_by_global_norm(k, grads.view(), 2.0, 1.0);  // a norm over the threshold: scaled
        });
    // The norm's terms as the trainer computes them: summed on the backend, read back once.
    kernels::DeviceDoubles terms;
    terms.reserve(k, 1);
    rates["grad_norm"] = double(P) / timed_kernel(world, 5, [&] {
                           k.sum_of_squares(terms.slot(0), grads.view());
                           (void)terms.read(k, 1);
                         });
  }
  return rates;
}

}  // namespace

double timed(const Communicator& world, int repeats, const std::function<void()>& work) {
  work();
  world.barrier();
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < repeats; ++i) work();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() / repeats;
}

double timed_kernel(const Communicator& world, int repeats, const std::function<void()>& work) {
  // The warm-up call also sizes the count: at least `repeats` calls and about 50 ms of them, a
  // call of a few microseconds timed a handful of times measuring the scheduler more than the
  // kernel. Every rank runs the same count (the largest), so that the ranks compute together
  // all along, as in a run.
  constexpr double kMinSeconds = 0.05;
  const auto warm = std::chrono::steady_clock::now();
  work();
  const double once =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - warm).count();
  int64_t calls = std::max<int64_t>(repeats, static_cast<int64_t>(std::ceil(kMinSeconds / once)));
  calls = std::min<int64_t>(calls, 100000);
  world.all_reduce(std::span<int64_t>(&calls, 1), ReduceOp::kMax);
  world.barrier();
  const auto start = std::chrono::steady_clock::now();
  for (int64_t i = 0; i < calls; ++i) work();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() /
         static_cast<double>(calls);
}

void probe_detail(const kernels::Kernels& k, const Communicator& world,
                  plan::HardwareProfile& profile) {
  for (const int64_t d : {128, 256, 512, 1024}) {
    for (const std::string dtype : {"float32", "bfloat16"}) {
      profile.matmul_by_size[dtype][d] = measure_matmul(k, world, parse_dtype(dtype), d, false);
      profile.matmul_by_size[dtype + "_backward"][d] =
          measure_matmul(k, world, parse_dtype(dtype), d, true);
    }
    profile.matmul_by_size["int8"][d] = measure_int8_matmul(k, world, d);
  }
  for (const int64_t head_dim : {32, 64, 128}) {
    for (const std::string dtype : {"float32", "bfloat16"}) {
      profile.attention_by_head_dim[dtype][head_dim] =
          measure_attention(k, world, parse_dtype(dtype), head_dim, true);
    }
  }
  for (const int64_t head_dim : {32, 64, 128}) {
    for (const std::string dtype : {"float32", "bfloat16"}) {
      profile.attention_by_head_dim[dtype + "_forward"][head_dim] =
          measure_attention(k, world, parse_dtype(dtype), head_dim, false);
    }
    for (const std::string cache : {"int8", "float32", "bfloat16"}) {
      for (const bool cached : {false, true}) {
        profile.attention_by_head_dim[cache + (cached ? "_decode_cached" : "_decode")][head_dim] =
            measure_decode_attention(k, world, cache, head_dim, cached);
      }
    }
  }
  // A decode step's matmuls: a fixed cost per call (a (4, 64) x (64, 128) call is little else)
  // and, net of it, the rate of 4 rows (a decode batch; the int8 tile's token count) times
  // (d, 2d) weights by d.
  for (const std::string kind : {"int8", "float32", "bfloat16"}) {
    const double call = time_decode_matmul(k, world, kind, 4, 64, 128, false);
    profile.call_seconds[kind + "_decode"] = call;
    for (const bool cached : {false, true}) {
      for (const int64_t d : {128, 256, 512, 1024, 2048}) {
        const double seconds = time_decode_matmul(k, world, kind, 4, d, 2 * d, cached);
        profile.matmul_by_size[kind + (cached ? "_decode_cached" : "_decode")][d] =
            2.0 * double(4 * d * 2 * d) / std::max(seconds - call, seconds / 20);
      }
    }
  }
  {
    Tensor rows = operand(k, {4, 64});
    kernels::Int8Rows quantized;
    profile.call_seconds["quantize_rows"] =
        timed_kernel(world, 20, [&] { k.int8_quantize_rows(quantized, rows.view()); });
  }
  profile.vector_rates = measure_vector_kernels(k, world);
  for (const auto* ops : {&plan::training_vector_ops(), &plan::inference_vector_ops()}) {
    for (const std::string& op : *ops) {
      MAXCTX_CHECK(profile.vector_rates.count(op), "probe-hardware does not measure '{}'", op);
    }
  }
}

}  // namespace maxctx::cli

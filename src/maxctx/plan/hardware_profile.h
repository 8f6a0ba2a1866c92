// A device's speeds and memory as data (configs/hardware/<name>.yml), for `maxctx plan`'s step
// times: peak FLOP/s per dtype, memory size and bandwidth, and the interconnect of each mesh tier
// (ici: inside a node or slice, dcn: across them) as bandwidth per device and latency per
// collective. Published devices come from their spec sheets (cited in each file); this machine's
// from `maxctx probe-hardware`, which measures it. A user adds a file for another device.
//
// What it is not: a simulator. The plan's time is compute at these rates plus the bytes each
// collective puts on the wire over the tier's bandwidth plus a latency per call, nothing
// overlapped (maxctx overlaps only the ring's hand-off).
#pragma once

#include <cstdint>
#include <map>
#include <string>

namespace maxctx::plan {

struct LinkSpeed {
  double bandwidth = 0;  // bytes/s a device sends (and receives) at once
  double latency = 0;    // seconds per collective call or message
};

struct HardwareProfile {
  std::string name;
  std::string source;       // where the numbers come from (spec sheet URL, or "measured")
  double memory_bytes = 0;  // per device
  // Resident per process before any buffer (the runtime: binary, libraries, MPI), added to a
  // plan's peak; probe-hardware measures it, 0 where the source gives no figure.
  double runtime_bytes = 0;
  double memory_bandwidth = 0;  // bytes/s
  double flops_f32 = 0;         // dense matmul FLOP/s per dtype of the matmul inputs
  double flops_bf16 = 0;
  double flops_int8 = 0;
  // A bf16 model's backward matmuls as maxctx runs them: f32 gradients against bf16 weights and
  // activations (model/activations.h). Optional (`flops: bfloat16_backward`); without it, the
  // bfloat16 rate (hardware that converts on the fly).
  double flops_bf16_backward = 0;
  // The FLOP/s attention reaches, as a fraction of the matmul rate of its dtype (1 where the
  // source gives no figure: the plan's time is then a lower bound).
  double attention_fraction = 1.0;
  LinkSpeed ici;
  LinkSpeed dcn;
  // The last-level cache one device has (probe-hardware: the CPU's, over the ranks that share
  // it); 0 where unknown. A decode step whose weights and KV cache fit in it reads them from
  // there step after step, at the "_decode_cached" rates below.
  double cache_bytes = 0;
  // Whether the device's memory is the host's (a CPU: probe-hardware writes true). On a GPU or
  // TPU (spec-sheet profiles) buffers a run keeps in host memory, such as a checkpoint's staged
  // copy, do not count against the device.
  bool host_memory = false;

  // Measured detail (probe-hardware writes it; spec-sheet profiles leave it out): small
  // matmuls and attention with small heads run below the peak, and a step also spends time in
  // vector kernels. Without a table the plan falls back to the figures above.
  //
  // FLOP/s of a matmul by its smallest dimension, per kind: "float32", "bfloat16", "int8" for an
  // (2048, d) x (d, 2d) forward, "<dtype>_backward" for its input and weight gradients together,
  // and "<int8 | dtype>_decode" for a decode step's (4, d) x (d, 2d) by d, net of call_seconds,
  // with the weights cold (read from memory, as a model larger than the cache is); the same with
  // "_decode_cached" for weights that stay in the cache between calls.
  std::map<std::string, std::map<int64_t, double>> matmul_by_size;
  // Attention FLOP/s (MaxText's count) by head_dim, per kind: "<dtype>" causal forward +
  // backward (a training step), "<dtype>_forward" causal forward (a prefill), and
  // "<int8 | dtype>_decode" single queries over a cache of that type (a decode step), cold and
  // "_decode_cached" as for the matmuls.
  std::map<std::string, std::map<int64_t, double>> attention_by_head_dim;
  // Elements per second of the engine's vector kernels: a training step's forward and backward
  // together (plan/step_work.h training_vector_ops()) and inference's forward alone
  // (plan/inference_work.h inference_vector_ops()).
  std::map<std::string, double> vector_rates;
  // Seconds one call costs beside its work, for the kernels a decode step calls on a few rows
  // (kinds: "<int8 | dtype>_decode" matmuls, "quantize_rows"): dispatch, setup and the
  // activations' quantization, which dominate a small model's step. The _decode matmul rates
  // above are net of it.
  std::map<std::string, double> call_seconds;

  double flops(std::string_view dtype) const;           // "float32" | "bfloat16" | "int8"
  double backward_flops(std::string_view dtype) const;  // the backward's matmul rate
  // The rate of a matmul whose smallest dimension is `smallest` (kind as in matmul_by_size):
  // the table interpolated in log2 of the size and held flat beyond its ends, else the peak.
  double matmul_rate(std::string_view kind, int64_t smallest) const;
  // Attention's rate at `head_dim`: the table, else the matmul peak x attention_fraction.
  double attention_rate(std::string_view dtype, int64_t head_dim) const;
  // Seconds of a vector kernel over `elements`: the measured rate, else the bytes it moves per
  // element over the memory bandwidth.
  double vector_seconds(const std::string& op, double elements, double bytes_per_element) const;
};

// `name_or_path`: a file path (ends in .yml/.yaml or contains '/'), else
// configs/hardware/<name>.yml under the config directory `config_dir`. Errors name the file and
// the key that is missing or not a positive number.
HardwareProfile load_hardware_profile(const std::string& name_or_path,
                                      const std::string& config_dir);

// The YAML of a profile (what probe-hardware writes; load_hardware_profile reads it back).
std::string format_hardware_profile(const HardwareProfile& profile);

}  // namespace maxctx::plan

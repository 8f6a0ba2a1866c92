// Activation recomputation (MaxText's `remat_policy`): which of a decoder layer's forward
// results training keeps for the backward, and which the backward recomputes from the layer's
// input just before it needs them.
//
// MaxText names the tensors a policy may save with checkpoint_name: query_proj, key_proj,
// value_proj (the q/k/v projections), context (the attention output), out_proj (o_proj's
// output), mlpwi_0/mlpwi_1 (gate and up) and mlpwo (down). Here a saved name maps to:
//   qkv      -> q and k after RoPE, v (the same bytes as before RoPE; RoPE is not redone),
//   context  -> the attention output and its log-sum-exp (what attention's backward reads),
//   out_proj -> the stream after attention (layer input + o_proj output: the same bytes),
//   mlpwi    -> gate and up,
//   mlpwo    -> always kept: layer input + down = the next layer's input, saved by every policy.
// The RMSNorm outputs and statistics, RoPE and SwiGLU are cheap elementwise work and are always
// recomputed unless nothing is (`none`). Recomputation calls the same kernels on the same
// inputs, so it reproduces the saved values bit for bit: every policy gives the gradients of
// `none` exactly. Under context parallelism a recomputed attention gathers K/V again (all_gather)
// or passes them around the ring again: the gathered K/V are never kept between forward and
// backward, whatever the policy (the backward gathers them once more for dK/dV).
//
// Host offload (MaxText's remat_policy=custom with a tensor set to `offload`): a kept tensor
// waits for the backward in host memory instead of the device's. On a device backend each
// layer's copy goes to the host after the layer's forward and comes back before its backward;
// the device holds one shared set of those buffers (and two of the layer inputs) instead of one
// per layer. On the cpu backend the device's memory is the host's: an offloaded tensor is simply
// kept where it is (no copy), which is what offloading it would leave in the same memory.
#pragma once

#include <string>

#include "maxctx/config/config.h"

namespace maxctx::model {

struct RematPolicy {
  std::string name = "none";
  bool save_all = true;   // `none`: every intermediate is kept (no recomputation)
  bool qkv = false;       // query_proj, key_proj, value_proj
  bool context = false;   // the attention output and lse
  bool out_proj = false;  // the stream after attention
  bool mlpwi = false;     // gate and up (mlpwi_0, mlpwi_1)
  // Of the kept tensors above, those kept in host memory (remat_policy=custom), and the layers'
  // inputs (decoder_layer_input=offload).
  struct Offloaded {
    bool layer_input = false;
    bool qkv = false;
    bool context = false;
    bool out_proj = false;
    bool mlpwi = false;
    bool any() const { return layer_input || qkv || context || out_proj || mlpwi; }
  } offloaded;
};

// Where remat_policy=custom keeps a tensor MaxText names (its RematLocation): recomputed in the
// backward, kept on the device, or kept in host memory.
enum class RematLocation { kRemat, kDevice, kOffload };
RematLocation remat_location_from(const std::string& key, const std::string& value);

// remat_policy=custom's per-tensor keys, MaxText's names and defaults.
struct CustomRemat {
  RematLocation decoder_layer_input = RematLocation::kDevice;
  RematLocation context = RematLocation::kRemat;
  RematLocation mlpwi = RematLocation::kRemat;
  RematLocation mlpwi_0 = RematLocation::kRemat;
  RematLocation mlpwi_1 = RematLocation::kRemat;
  RematLocation mlpwo = RematLocation::kRemat;
  RematLocation query_proj = RematLocation::kRemat;
  RematLocation key_proj = RematLocation::kRemat;
  RematLocation value_proj = RematLocation::kRemat;
  RematLocation qkv_proj = RematLocation::kRemat;
  RematLocation out_proj = RematLocation::kRemat;
};

// MaxText's remat_policy by name: none, full, minimal, minimal_with_context (minimal_flash),
// save_dot_with_context_except_mlp, save_dot_except_mlpwi, save_dot_except_mlp, save_qkv_proj,
// save_out_proj, and custom (`custom`'s tensors as given). The other host-offloading policies
// (qkv_proj_offloaded, minimal_offloaded) and the quantization ones are refused with an error
// naming the supported policies; so is a custom set this engine cannot keep as given (q, k and
// v in different places, a layer input recomputed).
RematPolicy remat_policy_from(const std::string& name, const CustomRemat& custom = {});

// The config's remat_policy, with remat_policy=custom's tensor keys.
RematPolicy remat_policy_of(const Config& config);

// The policy with its offloaded tensors kept on the device instead: what a backend whose memory
// is the host's (cpu) keeps, in the same bytes.
RematPolicy without_offload(RematPolicy policy);

// Every name remat_policy_from accepts, "a|b|...".
std::string supported_remat_policies();

}  // namespace maxctx::model

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
#pragma once

#include <string>

namespace maxctx::model {

struct RematPolicy {
  std::string name = "none";
  bool save_all = true;   // `none`: every intermediate is kept (no recomputation)
  bool qkv = false;       // query_proj, key_proj, value_proj
  bool context = false;   // the attention output and lse
  bool out_proj = false;  // the stream after attention
  bool mlpwi = false;     // gate and up (mlpwi_0, mlpwi_1)
};

// MaxText's remat_policy by name: none, full, minimal, minimal_with_context (minimal_flash),
// save_dot_with_context_except_mlp, save_dot_except_mlpwi, save_dot_except_mlp, save_qkv_proj,
// save_out_proj. The host-offloading ones (qkv_proj_offloaded, minimal_offloaded, custom) and
// the quantization ones are refused with an error naming the supported policies.
RematPolicy remat_policy_from(const std::string& name);

// Every name remat_policy_from accepts, "a|b|...".
std::string supported_remat_policies();

}  // namespace maxctx::model
